"""The `extension` config group as a validated dataclass."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from posexp import checks
from posexp.errors import PosexpError
from posexp.extension.attention import AttentionPlan, AttentionSpec
from posexp.extension.registry import (
    ExtensionMethod,
    check_factor,
    effective_params,
    get_extension,
    method_params,
)
from posexp.extension.spec import MethodSpec

_COMMON_KEYS = ("method", "factor", "original_length")


@dataclass(frozen=True)
class ExtensionConfig:
    """Which extension to use, its factor s, training length L0 and the method's own params.

    Checked once, here: the model and the kernels read these fields as they are. ``params``
    holds every param of the method at its effective value, so equal settings compare equal.
    """

    method: str = "none"
    factor: float = 1.0
    # None until the caller fills in the run's training length (see `with_original_length`).
    original_length: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    # The method spec this was set up from (an evaluation's cell), carried as the parser made
    # it; None for a config's extension. Not part of what the extension computes.
    spec: MethodSpec | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        ext = get_extension(self.method)
        # frozen: normalise through object.__setattr__ so later code sees float/int/plain dict.
        object.__setattr__(self, "factor", check_factor(self.factor, "extension.factor"))
        object.__setattr__(
            self,
            "original_length",
            checks.positive_int("extension.original_length", self.original_length, allow_none=True),
        )
        params = checks.mapping("extension params", self.params)
        object.__setattr__(self, "params", method_params(ext, params))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExtensionConfig:
        """Build from the flat YAML mapping: method, factor, original_length, then method params."""
        if not isinstance(data, Mapping):
            raise PosexpError(f"extension config must be a mapping, got {data!r}")
        flat = {str(k): v for k, v in data.items()}
        common = {k: flat.pop(k) for k in _COMMON_KEYS if k in flat}
        return cls(**common, params=flat)

    @classmethod
    def for_length(
        cls, method: str | MethodSpec, length: int, train_length: int, factor: float | None = None
    ) -> tuple[ExtensionConfig, str]:
        """The method (a name or a spec with settings) set up for sequences of ``length`` after
        training at ``train_length``, and a note: s = length / L0 unless the spec or ``factor``
        fixes it; 1 for none, for dynamic NTK (which scales itself) and for the methods that
        ignore s. Checked now by the method's declared settings, against L0 too, building
        nothing (``check_at_length``); the spec travels with it (``spec``)."""
        spec = method if isinstance(method, MethodSpec) else MethodSpec(method)
        ext, note = get_extension(spec.name), ""
        fixed = spec.factor if spec.factor is not None else factor
        if spec.name == "none":
            s = 1.0
        elif fixed is not None:
            s = float(fixed)
        elif ext.scales_with_length:
            # Dynamic NTK already scales with the length l; s = l/L0 on top would count it twice.
            s, note = 1.0, "dynamic: base follows the window length"
        elif not ext.uses_factor:
            s = 1.0  # ReRoPE, log scaling: the same at every length
        else:
            s = max(1.0, length / train_length)
        config = cls(spec.name, s, train_length, spec.settings, spec=spec)
        config.check_at_length()
        return config, note

    def check_at_length(self) -> None:
        """Check each setting against L0 as the method declares (``Setting.at_length``: a
        window below L0), at its effective value, without building a plan or an encoding."""
        if self.original_length is None:
            if self.registered.needs_original_length:
                raise PosexpError(f"extension {self.method!r} needs original_length, got None")
            return
        l0, full = self.original_length, dict(self.params)
        for setting in self.registered.settings:  # in order: a null may follow from those before
            if full.get(setting.name) is None and setting.null_means is not None:
                full[setting.name] = setting.null_means(full, self.factor, l0)
            if setting.at_length is not None:
                setting.at_length(f"extension.{setting.name}", full[setting.name], l0)

    @property
    def registered(self) -> ExtensionMethod:
        """The registered method object (its frequency function and what it acts on)."""
        return get_extension(self.method)

    def attention_plan(self) -> AttentionPlan | None:
        """A training-free method's plan for attention (one-line error for bad params); else None."""
        ext = self.registered
        if ext.attention is None:
            return None
        if self.original_length is None:
            raise PosexpError(f"extension {self.method!r} needs original_length, got None")
        return ext.attention(AttentionSpec(self.factor, self.original_length), **self.params)

    @property
    def effective_params(self) -> dict[str, Any]:
        """``params`` with every null that stands for a value at this factor and L0 filled in
        (what an evaluation record keeps); ``params`` as they are while L0 is unknown."""
        if self.original_length is None:
            return dict(self.params)
        return effective_params(self.registered, self.params, self.factor, self.original_length)

    def with_original_length(self, train_length: int) -> ExtensionConfig:
        """Fill a null original_length with the run's training length; keep an explicit one."""
        if self.original_length is not None:
            return self
        return dataclasses.replace(self, original_length=train_length)

    def to_dict(self) -> dict[str, Any]:
        """Flat mapping in the YAML layout, with every method param at its effective value."""
        return {
            "method": self.method,
            "factor": self.factor,
            "original_length": self.original_length,
            **self.params,
        }
