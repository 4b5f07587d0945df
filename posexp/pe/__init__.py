"""Positional encodings, one module each, registered by name."""

from posexp.pe import alibi, learned, none, rope, sinusoidal  # noqa: F401  (registers them)
from posexp.pe.alibi import alibi_slopes
from posexp.pe.base import (
    PE_REGISTRY,
    PEContext,
    PositionalEncoding,
    build_pe,
    register_pe,
)
from posexp.pe.learned import PositionOutOfRange
from posexp.pe.sinusoidal import sinusoidal_table

__all__ = [
    "PE_REGISTRY",
    "PEContext",
    "PositionOutOfRange",
    "PositionalEncoding",
    "alibi_slopes",
    "build_pe",
    "register_pe",
    "sinusoidal_table",
]
