"""RoPE context-extension maths: registry of methods, frequency computation and config."""

from posexp.extension import methods as _methods  # noqa: F401  (registers every method module)
from posexp.extension.config import ExtensionConfig
from posexp.extension.registry import (
    ACTS_ON,
    EXTENSIONS,
    ExtensionMethod,
    RopeSpec,
    baseline_method,
    check_factor,
    get_extension,
    position_scale,
    register_extension,
    rope_frequencies,
)

__all__ = [
    "ACTS_ON",
    "EXTENSIONS",
    "ExtensionConfig",
    "ExtensionMethod",
    "RopeSpec",
    "baseline_method",
    "check_factor",
    "get_extension",
    "position_scale",
    "register_extension",
    "rope_frequencies",
]
