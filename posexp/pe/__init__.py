"""Positional encodings, one module each, registered by name when this package is imported."""

import importlib
import pkgutil

from posexp.pe.base import (
    PE_REGISTRY,
    PEContext,
    PositionalEncoding,
    accepted_extensions,
    build_pe,
    check_extension,
    get_pe,
    register_pe,
)

# Every module of this package registers its encoding; a new one needs no edit here.
for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base":
        importlib.import_module(f"{__name__}.{_info.name}")

from posexp.pe.alibi import alibi_slopes  # noqa: E402
from posexp.pe.learned import PositionOutOfRange  # noqa: E402
from posexp.pe.sinusoidal import sinusoidal_table  # noqa: E402

__all__ = [
    "PE_REGISTRY",
    "PEContext",
    "PositionOutOfRange",
    "PositionalEncoding",
    "accepted_extensions",
    "alibi_slopes",
    "build_pe",
    "check_extension",
    "get_pe",
    "register_pe",
    "sinusoidal_table",
]
