"""STRING (An et al. 2024, "Why Does the Effective Context Length of LLMs Fall Short?").

Relative distances d = i - j below the shift S are kept; from S on they are shifted down to
d - S + W, so the largest distances, rarely trained, are replaced by well-trained ones from W
up. Up to S tokens attention is the model's own. STRING acts within the training length; to
read past it posexp sizes the shift by the evaluated length L = s·L0 when it is null: the
smallest S that brings the largest distance L - 1 - S + W below L0, at least ⌊L0/3⌋ (the paper's
0.33·L) and at most L0 - 1. Default W = L0/16 (the paper: 128 at lengths of 32K-128K).
"""

from __future__ import annotations

import math

import torch

from posexp.errors import PosexpError
from posexp.extension.attention import AttentionPlan, AttentionSpec, register_attention_method
from posexp.extension.settings import Setting, below_length, positive_int_or_null


def default_shift(original_length: int, local: int, target_length: float) -> int:
    """S = min(L0 - 1, max(⌊L0/3⌋, ⌈L⌉ - L0 + W)), and at least W."""
    fit = math.ceil(target_length) - original_length + local
    return max(local, min(original_length - 1, max(original_length // 3, fit)))


SETTINGS = (
    Setting(
        "shift",
        "S: an integer in [W, L0 - 1]; null = the smallest keeping distances at s·L0 below L0, "
        "within [⌊L0/3⌋, L0 - 1]",
        positive_int_or_null,
        at_length=below_length,
    ),
    Setting(
        "local",
        "W: an integer in [1, S], the distance shifted pairs start from; null = L0/16",
        positive_int_or_null,
        null_means=lambda given, s, l0: max(1, l0 // 16),
    ),
)


def string(
    spec: AttentionSpec, *, shift: int | None = None, local: int | None = None
) -> AttentionPlan:
    """Shift S (null: sized by s·L0) and local value W (null: L0/16): d -> d - S + W past S."""
    l0 = spec.original_length
    w = max(1, l0 // 16) if local is None else local
    s = default_shift(l0, w, spec.factor * l0) if shift is None else shift
    if not 1 <= w <= s:
        raise PosexpError(f"extension.local must be in [1, shift = {s}], got {w}")

    def classes(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        distance = q_pos[..., :, None] - k_pos[..., None, :]
        return (distance >= s).long()

    def shifted(q_pos: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q_pos - s + w, k_pos

    return AttentionPlan(classes=classes, rotations=(shifted,))


register_attention_method("string", acts_on="relative_positions", settings=SETTINGS)(string)
