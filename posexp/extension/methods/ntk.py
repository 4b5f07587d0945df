"""Static NTK-aware scaling (bloc97 2023): a larger base, so low frequencies stretch by s."""

from __future__ import annotations

import torch

from posexp.errors import PosexpError
from posexp.extension.registry import RopeSpec, register_extension
from posexp.extension.settings import Setting, number_rule

SETTINGS = (
    Setting(
        "alpha",
        "a number >= 1: base' = base·alpha^(d/(d-2)) whatever the length; null = the factor s",
        number_rule(">= 1", allow_none=True),
        null_means=lambda given, s, l0: s,
    ),
)


def ntk_exponent(spec: RopeSpec, method: str) -> float:
    """d/(d-2): makes the lowest frequency scale by exactly 1/s (YaRN paper Eq. 16)."""
    # Undefined at d = 2; the head dim is the model's, so it is only known here.
    if spec.head_dim < 4:
        raise PosexpError(f"extension {method!r} needs head_dim >= 4, got {spec.head_dim}")
    return spec.head_dim / (spec.head_dim - 2)


@register_extension("ntk", settings=SETTINGS)
def ntk(spec: RopeSpec, *, alpha: float | None = None) -> tuple[torch.Tensor, float]:
    """Static NTK-aware scaling: base' = base·α^(d/(d-2)), α = s unless set (bloc97's alpha)."""
    scale = spec.factor if alpha is None else alpha
    return spec.theta(spec.base * scale ** ntk_exponent(spec, "ntk")), 1.0
