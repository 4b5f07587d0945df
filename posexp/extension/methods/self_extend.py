"""Self-Extend (Jin et al. 2024, "LLM Maybe LongLM"): grouped positions for distant pairs.

A query at position i and a key at j with i - j < W (the neighbour window) keep their RoPE
positions. Every farther pair is rotated at grouped positions, the query at floor(i/G) + W -
floor(W/G) and the key at floor(j/G), so its relative distance is floor(i/G) - floor(j/G) +
W - floor(W/G): distances grow G times slower past the window, starting near W where the window
ends. Both kinds of pair share one softmax. With G = 1 the grouped distance is i - j: plain RoPE.
"""

from __future__ import annotations

import math

import torch

from posexp.extension.attention import (
    AttentionPlan,
    AttentionSpec,
    log_length_scale,
    register_attention_method,
    window_size,
)
from posexp.extension.settings import LOGN, WINDOW_TEXT, Setting, below_length, positive_int_or_null


def smallest_group(original_length: int, window: int, target_length: float) -> int:
    """The smallest G whose largest grouped distance at the target length L stays below L0.

    The paper sizes G by (L0 - W)·G + W >= L; with the floors of the grouped positions the
    largest distance, floor((L - 1)/G) + W - floor(W/G), can still reach L0 at that G (L0 64, W 16,
    L 1024: G 21 gives 64), so G grows from that estimate until it is below L0.
    """
    last = math.ceil(target_length) - 1
    group = max(1, math.ceil((last + 1 - window) / (original_length - window)))
    while last // group + window - window // group > original_length - 1:
        group += 1
    return group


SETTINGS = (
    Setting(
        "window",
        f"W: {WINDOW_TEXT}; null = L0 / 4",
        positive_int_or_null,
        null_means=lambda given, s, l0: l0 // 4,
        at_length=below_length,
    ),
    Setting(
        "group",
        "G: a positive integer; null = the smallest G that keeps every distance at s·L0 below "
        "L0 (1 = plain RoPE)",
        positive_int_or_null,
        null_means=lambda given, s, l0: smallest_group(l0, given["window"], s * l0),
    ),
    LOGN,
)


def self_extend(
    spec: AttentionSpec,
    *,
    window: int | None = None,
    group: int | None = None,
    logn: bool = False,
) -> AttentionPlan:
    """Neighbour window W (null: L0/4), group size G (null: the smallest that fits s·L0 in L0),
    optional log-length scaling."""
    l0 = spec.original_length
    w = window_size(window, l0 // 4, l0)
    g = smallest_group(l0, w, spec.factor * l0) if group is None else group
    shift = w - w // g

    def far(q_pos: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.div(q_pos, g, rounding_mode="floor") + shift, torch.div(
            k_pos, g, rounding_mode="floor"
        )

    scale = (lambda pos: log_length_scale(pos, l0)) if logn else None
    return AttentionPlan(window=w, far=far, query_scale=scale)


register_attention_method("self_extend", acts_on="relative_positions", settings=SETTINGS)(
    self_extend
)
