"""Positional encodings, one module each, registered by name when this package is imported."""

from posexp.pe.base import (
    PE_REGISTRY,
    LocalAttention,
    LogitTerm,
    PEContext,
    PositionalEncoding,
    PositionOutOfRange,
    accepted_extensions,
    append_cached,
    build_pe,
    cached,
    check_extension,
    get_pe,
    register_pe,
    takes_extension,
)
from posexp.registry import discover

# Every module of this package registers its encoding; a new one needs no edit here.
discover(__name__, __path__, skip=("base",))

from posexp.pe.alibi import alibi_slopes  # noqa: E402
from posexp.pe.sinusoidal import sinusoidal_table  # noqa: E402

__all__ = [
    "PE_REGISTRY",
    "LocalAttention",
    "LogitTerm",
    "PEContext",
    "PositionOutOfRange",
    "PositionalEncoding",
    "accepted_extensions",
    "append_cached",
    "alibi_slopes",
    "build_pe",
    "cached",
    "check_extension",
    "get_pe",
    "register_pe",
    "sinusoidal_table",
    "takes_extension",
]
