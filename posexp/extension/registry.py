"""Registry of context-extension methods and the checks shared by every method.

Values are checked where they enter: ``ExtensionConfig`` (the config and the CLI) and the two
public entry points below (``rope_frequencies``, ``position_scale``). A method function receives
inputs already checked, so the model's path from config to kernel checks nothing twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from posexp import checks
from posexp.errors import PosexpError
from posexp.extension.settings import FACTOR, Setting
from posexp.registry import Registry

# What a method changes. A positional encoding declares which of these it has (posexp/pe/base.py),
# so neither side names the other: "nothing" (method none) suits every encoding, "positions"
# (position interpolation) suits any encoding that reads positions, "frequencies" only rotations;
# "relative_positions" (Self-Extend, ReRoPE) remaps the distance a rotation sees per query-key
# pair, and "logits" (log-length scaling) rescales the scores of any attention.
ACTS_ON = ("nothing", "positions", "frequencies", "relative_positions", "logits")


@dataclass(frozen=True)
class RopeSpec:
    """Checked, method-independent inputs of one frequency computation."""

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
# Checks what a method's settings must satisfy together (each one already checked alone, every
# one present, defaults filled in), naming them with the prefix given; returns them.
RelationCheck = Callable[[dict[str, Any], str], dict[str, Any]]


@dataclass(frozen=True)
class ExtensionMethod:
    """One registered method: its frequency function plus what the rest of posexp asks of it."""

    name: str
    frequencies: FrequencyFn
    params: Mapping[str, Any]
    # True when the frequencies depend on the current length (cached keys are then re-rotated).
    dynamic: bool
    acts_on: str
    needs_original_length: bool
    settings: tuple[Setting, ...] = ()
    relations: RelationCheck | None = None
    # Training-free methods (posexp/extension/attention.py) change attention itself, at evaluation:
    # the function that builds their AttentionPlan, else None.
    attention: Callable[..., Any] | None = None
    # False when the method ignores the factor s (evaluations then record s = 1).
    uses_factor: bool = True
    # What reports say of it (posexp/commands/report/views), so no view names a method: whether
    # its zero-shot results get a verdict against no extension, and the static method it equals
    # when every window is scored from position 0 (dynamic NTK: NTK).
    zero_shot_verdict: bool = False
    static_form: str | None = None
    # What a reader must know beside any number of it (blockwise: how little context it keeps).
    caveat: str | None = None
    # True when the method scales itself with the current length (dynamic NTK), so an
    # evaluation holds s at 1; a dynamic method with a fixed target s (LongRoPE) sets False.
    scales_with_length: bool = False

    @property
    def training_free(self) -> bool:
        """True for methods that change attention at evaluation only (no run trains with them)."""
        return self.attention is not None

    def __call__(
        self, spec: RopeSpec, params: Mapping[str, Any] | None = None
    ) -> tuple[torch.Tensor, float]:
        """(float32 inv_freq, attention_factor) for checked inputs, method defaults filled in."""
        # Computed in float64 so that float32 rounding happens once, at the end. A training-free
        # method's params are its attention plan's, not the frequencies'.
        kwargs = {} if self.training_free else {**self.params, **(params or {})}
        inv_freq, attention_factor = self.frequencies(spec, **kwargs)
        return inv_freq.to(torch.float32), float(attention_factor)

    def position_divisor(self, factor: float) -> float:
        """How much an absolute-position encoding divides positions by: s under PI, else 1."""
        return factor if self.acts_on == "positions" else 1.0

    @property
    def spec_settings(self) -> tuple[Setting, ...]:
        """What a method spec may set: the method's settings, and the factor if it uses one."""
        scales = self.uses_factor and self.acts_on != "nothing"
        return (*self.settings, FACTOR) if scales else self.settings


EXTENSIONS: Registry[ExtensionMethod] = Registry("extension")


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
    settings: tuple[Setting, ...] = (),
    relations: RelationCheck | None = None,
    attention: Callable[..., Any] | None = None,
    uses_factor: bool = True,
    zero_shot_verdict: bool | None = None,
    static_form: str | None = None,
    caveat: str | None = None,
    scales_with_length: bool | None = None,
) -> Callable[[FrequencyFn], FrequencyFn]:
    """Register `fn(spec, *, param=default, ...) -> (float64 inv_freq, attention_factor)` as `name`.

    ``settings`` declares each keyword-only param (what it allows, its checker); ``relations``
    checks what they must satisfy together. Both run once, when a config or a spec names them.
    ``attention`` (training-free methods) builds the method's AttentionPlan; its keyword-only
    params are the method's params. ``zero_shot_verdict`` (default: training-free methods),
    ``static_form`` and ``caveat`` say what reports write of it. ``scales_with_length``
    (default: ``dynamic``) holds an evaluation's s at 1, the method scaling itself.
    """

    def decorate(fn: FrequencyFn) -> FrequencyFn:
        if acts_on not in ACTS_ON:
            raise ValueError(
                f"extension {name!r}: acts_on must be one of {ACTS_ON}, got {acts_on!r}"
            )
        defaults = _keyword_defaults(attention or fn)
        if [s.name for s in settings] != list(defaults):
            raise ValueError(
                f"extension {name!r}: settings {[s.name for s in settings]} must declare its "
                f"keyword-only params {list(defaults)}, in order"
            )
        EXTENSIONS.add(
            name,
            ExtensionMethod(
                name=name,
                frequencies=fn,
                params=MappingProxyType(defaults),
                dynamic=dynamic,
                acts_on=acts_on,
                needs_original_length=needs_original_length,
                settings=tuple(settings),
                relations=relations,
                attention=attention,
                uses_factor=uses_factor,
                zero_shot_verdict=attention is not None
                if zero_shot_verdict is None
                else zero_shot_verdict,
                static_form=static_form,
                caveat=caveat,
                scales_with_length=dynamic if scales_with_length is None else scales_with_length,
            ),
        )
        return fn

    return decorate


def baseline_method() -> str:
    """The method that changes nothing (``none``): what every other is compared with."""
    return next(name for name, m in EXTENSIONS.items() if m.acts_on == "nothing")


def get_extension(method: str) -> ExtensionMethod:
    """Look up a registered method, raising PosexpError that lists the allowed names."""
    return EXTENSIONS.get(method)


# ---- shared validation -------------------------------------------------------------------


def check_factor(factor: Any, name: str = "factor") -> float:
    """Return factor as float; integers are fine (transformers #37134), values below 1 are not."""
    return checks.number(name, factor, ">= 1")


def check_original_length(method: ExtensionMethod, original_length: Any) -> int | None:
    """Validate original_length, requiring it for methods that measure against the training length."""
    if original_length is None:
        if method.needs_original_length:
            raise PosexpError(
                f"extension {method.name!r} needs original_length (the training length), got None"
            )
        return None
    return checks.positive_int("original_length", original_length)


def method_params(
    method: ExtensionMethod, params: Mapping[str, Any], prefix: str = "extension."
) -> dict[str, Any]:
    """Every param of the method at its effective value (None: the default); unknown names and
    bad values are refused, each named ``prefix`` + its name."""
    for key in params:
        if key not in method.params:
            allowed = ", ".join(sorted(method.params)) or "(none)"
            raise PosexpError(
                f"unknown param {key!r} for extension {method.name!r}; allowed: {allowed}"
            )
    full = {**method.params, **{k: v for k, v in params.items() if v is not None}}
    full = {s.name: s.check(prefix + s.name, full[s.name]) for s in method.settings}
    return full if method.relations is None else method.relations(full, prefix)


def effective_params(
    method: ExtensionMethod, params: Mapping[str, Any], factor: float, original_length: int
) -> dict[str, Any]:
    """``params`` (checked, as ``method_params`` returns them) with each null that stands for a
    value at this s and L0 replaced by it (``Setting.null_means``), in declaration order."""
    full = dict(params)
    for setting in method.settings:
        if full.get(setting.name) is None and setting.null_means is not None:
            full[setting.name] = setting.null_means(full, factor, original_length)
    return full


def _check_head_dim(head_dim: Any) -> int:
    d = checks.positive_int("head_dim", head_dim)
    if d % 2:
        raise PosexpError(f"head_dim must be a positive even integer, got {head_dim!r}")
    return d


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
        # ln(base) is a denominator in YaRN and θ_i must decrease with i.
        base=checks.number("base", base, "> 1"),
        factor=check_factor(factor),
        original_length=check_original_length(ext, original_length),
        seq_len=None if seq_len is None else checks.positive_int("seq_len", seq_len),
    )
    return ext(spec, method_params(ext, params))


def position_scale(method: str, factor: float) -> float:
    """Multiplier on positions for additive PEs (sinusoidal, learned): 1/s for pi, else 1.0."""
    # Not for rope: rope_frequencies already folds pi into inv_freq, so both would scale twice.
    return 1.0 / get_extension(method).position_divisor(check_factor(factor))
