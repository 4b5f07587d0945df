"""LM-Infinite (Han et al. 2024, "LM-Infinite: Zero-Shot Extreme Length Generalization").

A Λ-shaped mask: a query sees its last W keys (i - j < W, at their true distances) and the
first G keys (the global branch); a global key outside the window is scored at the capped
distance min(cap, i): the key unrotated (position 0), the query at min(cap, i). No pair is
farther apart than max(W - 1, cap), whatever the length. Up to W tokens attention is the
model's own.
"""

from __future__ import annotations

import torch

from posexp.errors import PosexpError
from posexp.extension.attention import AttentionPlan, AttentionSpec, register_attention_method
from posexp.extension.methods.streaming_llm import non_negative_int
from posexp.extension.settings import Setting, positive_int_or_null


def at_most_length(name: str, value: object, original_length: int) -> None:
    """A window or cap in [1, L0]: LM-Infinite's defaults are L0 itself."""
    if value is not None and not 1 <= int(value) <= original_length:  # type: ignore[call-overload]
        raise PosexpError(
            f"{name} must be in [1, {original_length}] (the training length), got {value}"
        )


SETTINGS = (
    Setting(
        "window",
        "n_local: an integer in [1, L0], the recent keys seen; null = L0",
        positive_int_or_null,
        null_means=lambda given, s, l0: l0,
        at_length=at_most_length,
    ),
    Setting(
        "cap",
        "d*: an integer in [1, L0], the distance of a global key outside the window; null = L0",
        positive_int_or_null,
        null_means=lambda given, s, l0: l0,
        at_length=at_most_length,
    ),
    Setting("sinks", "n_global: an integer >= 0, the first keys always seen", non_negative_int),
)


def lm_infinite(
    spec: AttentionSpec, *, window: int | None = None, cap: int | None = None, sinks: int = 4
) -> AttentionPlan:
    """The last W keys (null: L0) at true distances, the first G at distance min(cap, i)."""
    l0 = spec.original_length
    w, d_cap = (l0 if window is None else window), (l0 if cap is None else cap)
    for name, value in (("window", w), ("cap", d_cap)):
        at_most_length(f"extension.{name}", value, l0)

    def classes(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        distance = q_pos[..., :, None] - k_pos[..., None, :]
        first = (k_pos < sinks)[..., None, :].expand_as(distance)
        return torch.where(distance < w, 0, torch.where(first, 1, -1))

    def capped(q_pos: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q_pos.clamp(max=d_cap), torch.zeros_like(k_pos)

    return AttentionPlan(classes=classes, rotations=(capped,), window_sinks=(w, sinks))


register_attention_method(
    "lm_infinite", acts_on="relative_positions", uses_factor=False, settings=SETTINGS
)(lm_infinite)
