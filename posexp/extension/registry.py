"""Registry of context-extension methods and the checks shared by every method."""

from __future__ import annotations

import inspect
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from posexp.errors import PosexpError, choose

# What a method changes. A positional encoding declares which of these it has (posexp/pe/base.py),
# so neither side names the other: "nothing" (method none) suits every encoding, "positions"
# (position interpolation) suits any encoding that reads positions, "frequencies" only rotations.
ACTS_ON = ("nothing", "positions", "frequencies")


@dataclass(frozen=True)
class RopeSpec:
    """Validated, method-independent inputs of one frequency computation."""

    head_dim: int
    base: float
    factor: float
    original_length: int | None
    seq_len: int | None

    def theta(self, base: float | None = None) -> torch.Tensor:
        """Unscaled float64 frequencies θ_i = base^(-2i/d), i in 0..d/2-1."""
        b = self.base if base is None else base
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim
        return 1.0 / (b**exponents)


FrequencyFn = Callable[..., tuple[torch.Tensor, float]]


@dataclass(frozen=True)
class ExtensionMethod:
    """One registered method: its frequency function plus what the rest of posexp asks of it."""

    name: str
    frequencies: FrequencyFn
    params: Mapping[str, Any]
    dynamic: bool
    acts_on: str
    needs_original_length: bool

    def __call__(self, spec: RopeSpec, **params: Any) -> tuple[torch.Tensor, float]:
        """Run the frequency function with this method's defaults filled in."""
        return self.frequencies(spec, **{**self.params, **params})


EXTENSIONS: dict[str, ExtensionMethod] = {}


def _keyword_defaults(fn: FrequencyFn) -> dict[str, Any]:
    # The method's own params are its keyword-only arguments, so the allowed names and their
    # defaults cannot drift from the code that uses them.
    sig = inspect.signature(fn)
    return {
        p.name: p.default
        for p in sig.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def register_extension(
    name: str,
    *,
    dynamic: bool = False,
    acts_on: str = "frequencies",
    needs_original_length: bool = False,
) -> Callable[[FrequencyFn], FrequencyFn]:
    """Register `fn(spec, *, param=default, ...) -> (float64 inv_freq, attention_factor)` as `name`."""

    def decorate(fn: FrequencyFn) -> FrequencyFn:
        if name in EXTENSIONS:
            raise ValueError(f"extension {name!r} registered twice")
        if acts_on not in ACTS_ON:
            raise ValueError(f"extension {name!r}: acts_on must be one of {ACTS_ON}, got {acts_on!r}")
        EXTENSIONS[name] = ExtensionMethod(
            name=name,
            frequencies=fn,
            params=MappingProxyType(_keyword_defaults(fn)),
            dynamic=dynamic,
            acts_on=acts_on,
            needs_original_length=needs_original_length,
        )
        return fn

    return decorate


def get_extension(method: str) -> ExtensionMethod:
    """Look up a registered method, raising PosexpError that lists the allowed names."""
    choose("extension", method, EXTENSIONS)
    return EXTENSIONS[method]


# ---- shared validation -------------------------------------------------------------------


def _as_int(name: str, value: Any) -> int:
    # bool is an int subclass; `head_dim: true` in YAML is a mistake, not 1.
    if isinstance(value, bool):
        raise PosexpError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise PosexpError(f"{name} must be an integer, got {value!r}") from None


def as_number(name: str, value: Any) -> float:
    """Coerce an int/float param to float, raising PosexpError for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PosexpError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise PosexpError(f"{name} must be a finite number, got {value!r}")
    return value


def check_factor(factor: Any) -> float:
    """Return factor as float; integers are fine (transformers #37134), values below 1 are not."""
    value = as_number("factor", factor)
    if value < 1.0:
        raise PosexpError(f"factor must be >= 1, got {factor!r}")
    return value


def check_positive_length(name: str, value: Any) -> int | None:
    """None passes through; anything else must be a positive integer."""
    if value is None:
        return None
    n = _as_int(name, value)
    if n <= 0:
        raise PosexpError(f"{name} must be a positive integer, got {value!r}")
    return n


def check_original_length(method: ExtensionMethod, original_length: Any) -> int | None:
    """Validate original_length, requiring it for methods that measure against the training length."""
    n = check_positive_length("original_length", original_length)
    if n is None and method.needs_original_length:
        raise PosexpError(
            f"extension {method.name!r} needs original_length (the training length), got None"
        )
    return n


def check_params(method: ExtensionMethod, params: Mapping[str, Any]) -> dict[str, Any]:
    """Reject names the method does not take; drop None so the method default applies."""
    for key in params:
        if key not in method.params:
            allowed = ", ".join(sorted(method.params)) or "(none)"
            raise PosexpError(
                f"unknown param {key!r} for extension {method.name!r}; allowed: {allowed}"
            )
    return {k: v for k, v in params.items() if v is not None}


def _check_head_dim(head_dim: Any) -> int:
    d = _as_int("head_dim", head_dim)
    if d <= 0 or d % 2:
        raise PosexpError(f"head_dim must be a positive even integer, got {head_dim!r}")
    return d


def _check_base(base: Any) -> float:
    value = as_number("base", base)
    # ln(base) is a denominator in YaRN and θ_i must decrease with i.
    if value <= 1.0:
        raise PosexpError(f"base must be > 1, got {base!r}")
    return value


# ---- public entry points -----------------------------------------------------------------


def rope_frequencies(
    method: str,
    head_dim: int,
    base: float = 10000.0,
    factor: float = 1.0,
    original_length: int | None = None,
    seq_len: int | None = None,
    **params: Any,
) -> tuple[torch.Tensor, float]:
    """Return (float32 inv_freq of shape (head_dim//2,), attention_factor) for a RoPE extension."""
    ext = get_extension(method)
    spec = RopeSpec(
        head_dim=_check_head_dim(head_dim),
        base=_check_base(base),
        factor=check_factor(factor),
        original_length=check_original_length(ext, original_length),
        seq_len=check_positive_length("seq_len", seq_len),
    )
    # Computed in float64 so that float32 rounding happens once, at the end.
    inv_freq, attention_factor = ext(spec, **check_params(ext, params))
    return inv_freq.to(torch.float32), float(attention_factor)


def position_scale(method: str, factor: float) -> float:
    """Multiplier on positions for additive PEs (sinusoidal, learned): 1/s for pi, else 1.0."""
    # Not for rope: rope_frequencies already folds pi into inv_freq, so both would scale twice.
    ext = get_extension(method)
    s = check_factor(factor)
    return 1.0 / s if ext.acts_on == "positions" else 1.0
