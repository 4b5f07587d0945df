"""YaRN (Peng et al. 2023): a per-pair ramp between θ and θ/s, plus an attention factor."""

from __future__ import annotations

import math
from typing import Any

import torch

from posexp.errors import PosexpError
from posexp.extension.registry import RopeSpec, register_extension
from posexp.extension.settings import Setting, number_rule


def default_attention_factor(s: float) -> float:
    """YaRN's attention factor for scale s: 0.1·ln(s) + 1, and 1 at s = 1."""
    return 0.1 * math.log(s) + 1.0 if s > 1 else 1.0


SETTINGS = (
    Setting(
        "beta_fast",
        "a number > beta_slow: pairs turning more than beta_fast times over L0 keep θ",
        number_rule("> 0"),
    ),
    Setting(
        "beta_slow",
        "a number > 0: pairs turning fewer than beta_slow times over L0 get θ/s",
        number_rule("> 0"),
    ),
    Setting(
        "attention_factor",
        "a number > 0; null = 0.1·ln(s) + 1 (1 at s = 1)",
        number_rule("> 0", allow_none=True),
        null_means=lambda given, s, l0: default_attention_factor(s),
    ),
)


def relations(params: dict[str, Any], prefix: str) -> dict[str, Any]:
    """beta_fast > beta_slow."""
    fast, slow = params["beta_fast"], params["beta_slow"]
    if fast <= slow:
        # A swapped pair silently inverts the ramp (torchtitan #3787), so refuse it.
        raise PosexpError(
            f"{prefix}beta_fast must be > beta_slow, got beta_fast={fast:g}, beta_slow={slow:g}"
        )
    return params


def _correction_dim(spec: RopeSpec, rotations: float) -> float:
    # Index of the dimension that turns `rotations` times over the training length.
    return (
        spec.head_dim
        * math.log(spec.original_length / (2 * math.pi * rotations))
        / (2 * math.log(spec.base))
    )


@register_extension(
    "yarn",
    needs_original_length=True,
    settings=SETTINGS,
    relations=relations,
    zero_shot_verdict=True,
)
def yarn(
    spec: RopeSpec,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    attention_factor: float | None = None,
) -> tuple[torch.Tensor, float]:
    """YaRN: ramp from θ (fast pairs) to θ/s (slow pairs) plus attention factor 0.1·ln(s)+1."""
    d, s = spec.head_dim, spec.factor
    lo = min(max(math.floor(_correction_dim(spec, beta_fast)), 0), d - 1)
    hi = min(max(math.ceil(_correction_dim(spec, beta_slow)), 0), d - 1)
    if hi == lo:
        hi += 0.001  # a one-index range would divide by zero
    ramp = ((torch.arange(d // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0.0, 1.0)
    theta = spec.theta()
    inv_freq = (theta / s) * ramp + theta * (1.0 - ramp)
    if attention_factor is None:
        attention_factor = default_attention_factor(s)
    return inv_freq, attention_factor
