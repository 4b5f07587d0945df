"""RoPE context-extension maths: registry of methods, frequency computation and config."""

from posexp.extension import methods as _methods  # noqa: F401  (registers the built-in methods)
from posexp.extension.config import ExtensionConfig
from posexp.extension.registry import (
    ALL_PES,
    EXTENSIONS,
    PE_NAMES,
    ExtensionMethod,
    RopeSpec,
    check_applicable,
    get_extension,
    position_scale,
    register_extension,
    rope_frequencies,
)

__all__ = [
    "ALL_PES",
    "EXTENSIONS",
    "PE_NAMES",
    "ExtensionConfig",
    "ExtensionMethod",
    "RopeSpec",
    "check_applicable",
    "get_extension",
    "position_scale",
    "register_extension",
    "rope_frequencies",
]
