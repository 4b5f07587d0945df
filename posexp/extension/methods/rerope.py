"""ReRoPE and leaky ReRoPE (Su 2023): relative positions clipped, or slowed, past a window w.

A query-key pair at distance r = i - j keeps it while r < w. Past the window, ReRoPE rotates the
pair as if r were w (the query at position w, the key at 0); leaky ReRoPE continues with slope
1/k instead, r' = w + (r - w)/k (the query at w + (i - w)/k, the key at j/k). Distances the model
never saw in training (r >= L0) thus map back below L0: to w, or to w + (r - w)/k.
"""

from __future__ import annotations

import torch

from posexp.extension.attention import (
    AttentionPlan,
    AttentionSpec,
    log_length_scale,
    register_attention_method,
    window_size,
)
from posexp.extension.settings import (
    LOGN,
    WINDOW_TEXT,
    Setting,
    below_length,
    number_rule,
    positive_int_or_null,
)

SETTINGS = (
    Setting(
        "window",
        f"w: {WINDOW_TEXT}; null = L0 / 2",
        positive_int_or_null,
        null_means=lambda given, s, l0: l0 // 2,
        at_length=below_length,
    ),
    Setting(
        "leaky_k",
        "a number > 1: leaky ReRoPE, r' = w + (r - w)/k; null = ReRoPE (clip at w)",
        number_rule("> 1", allow_none=True),
    ),
    LOGN,
)


def rerope(
    spec: AttentionSpec,
    *,
    window: int | None = None,
    leaky_k: float | None = None,
    logn: bool = False,
) -> AttentionPlan:
    """Window w (null: L0/2); leaky_k null clips at w, a number k continues with slope 1/k."""
    l0 = spec.original_length
    w = window_size(window, l0 // 2, l0)

    def far(q_pos: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if leaky_k is None:
            return torch.full_like(q_pos, w, dtype=torch.float64), torch.zeros_like(
                k_pos, dtype=torch.float64
            )
        return w + (q_pos.double() - w) / leaky_k, k_pos.double() / leaky_k

    scale = (lambda pos: log_length_scale(pos, l0)) if logn else None
    return AttentionPlan(window=w, far=far, query_scale=scale)


register_attention_method(
    "rerope", acts_on="relative_positions", uses_factor=False, settings=SETTINGS
)(rerope)
