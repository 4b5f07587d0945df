"""LongRoPE (Ding et al. 2024): a rescale factor per rotation pair, one list past L0, one within.

θ'_i = θ_i / λ_i, with λ = ``long_factor`` when the current length exceeds L0 and
``short_factor`` otherwise (Hugging Face's ``longrope`` rope type, Phi-3's released scaling).
The paper finds the lists by an evolutionary search; without one, ``long_factor`` null is the
stated rule λ_i = s^(2i/(d-2)), NTK-aware scaling written per pair (1 for the fastest pair, s
for the slowest; one of the starting points of the paper's search), and ``short_factor`` null
is 1 for every pair, so within L0 the model sees its own frequencies. Since the list in use
depends on the current length, the method is dynamic: cached keys are kept unrotated and
rotated again at every step (exact in the first layer; deeper layers keep what earlier steps'
frequencies made, docs/catalogue.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from posexp import checks
from posexp.errors import PosexpError
from posexp.extension.registry import RopeSpec, register_extension
from posexp.extension.settings import Setting, number_rule


def factor_list(name: str, value: Any) -> list[float] | None:
    """null, or a non-empty list of finite numbers > 0 (the head dim checks its length)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or not value:
        raise PosexpError(
            f"{name} must be a list of numbers > 0, one per rotated pair "
            f"(e.g. {name}=[1,1.5,2,4]), or null, got {value!r}"
        )
    return [checks.number(f"{name}[{i}]", v, "> 0") for i, v in enumerate(value)]


def default_attention_factor(s: float, original_length: int) -> float | None:
    """sqrt(1 + ln(s) / ln(L0)), 1 at s = 1; None where L0 < 2 leaves it undefined."""
    if s <= 1:
        return 1.0
    return math.sqrt(1 + math.log(s) / math.log(original_length)) if original_length > 1 else None


SETTINGS = (
    Setting(
        "long_factor",
        "a list of numbers > 0, one per rotated pair, used past L0; null = s^(2i/(d-2)) for "
        "pair i (NTK-aware, 1 to s)",
        factor_list,
    ),
    Setting(
        "short_factor",
        "a list of numbers > 0, one per rotated pair, used up to L0; null = 1 for every pair",
        factor_list,
    ),
    Setting(
        "attention_factor",
        "a number > 0; null = sqrt(1 + ln(s) / ln(L0)) (1 at s = 1)",
        number_rule("> 0", allow_none=True),
        null_means=lambda given, s, l0: default_attention_factor(s, l0),
    ),
)


def default_long_factor(spec: RopeSpec) -> torch.Tensor:
    """λ_i = s^(2i/(d-2)): NTK-aware scaling as per-pair factors (one pair: s)."""
    pairs = torch.arange(spec.head_dim // 2, dtype=torch.float64)
    exponent = (
        2 * pairs / (spec.head_dim - 2) if spec.head_dim > 2 else torch.ones(1, dtype=torch.float64)
    )
    return spec.factor**exponent


def _per_pair(spec: RopeSpec, name: str, given: list[float] | None) -> torch.Tensor | None:
    # The head dim is the model's (a partial rotary's rotated dims), so the length is checked
    # here, when the model computes its frequencies, not with the config.
    if given is None:
        return None
    pairs = spec.head_dim // 2
    if len(given) != pairs:
        raise PosexpError(
            f"extension.{name} has {len(given)} entries; the {spec.head_dim} rotated dims of "
            f"each head need {pairs}, one per pair"
        )
    return torch.tensor(given, dtype=torch.float64)


@register_extension(
    "longrope",
    dynamic=True,
    needs_original_length=True,
    settings=SETTINGS,
    scales_with_length=False,
)
def longrope(
    spec: RopeSpec,
    *,
    long_factor: list[float] | None = None,
    short_factor: list[float] | None = None,
    attention_factor: float | None = None,
) -> tuple[torch.Tensor, float]:
    """LongRoPE: θ_i / long_factor_i past L0, θ_i / short_factor_i up to it; af sqrt(1 + ln s/ln L0)."""
    long_ = _per_pair(spec, "long_factor", long_factor)
    short = _per_pair(spec, "short_factor", short_factor)
    s, l0 = spec.factor, spec.original_length
    if attention_factor is None:
        attention_factor = default_attention_factor(s, l0)
        if attention_factor is None:
            raise PosexpError(
                f"extension 'longrope' needs original_length >= 2 for its attention factor "
                f"sqrt(1 + ln(s)/ln(L0)), got {l0}; set extension.attention_factor"
            )
    if spec.seq_len is not None and spec.seq_len > l0:
        factors = default_long_factor(spec) if long_ is None else long_
    else:
        factors = torch.ones(spec.head_dim // 2, dtype=torch.float64) if short is None else short
    return spec.theta() / factors, attention_factor
