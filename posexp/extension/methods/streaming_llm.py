"""StreamingLLM (Xiao et al. 2024, "Efficient Streaming Language Models with Attention Sinks").

A query keeps the first S tokens (the attention sinks) and its last W tokens, itself included;
every other key is evicted. Positions are the slots of that cache, not text positions: the query
sits at slot min(i, S + W - 1), a recent key keeps its distance i - j, and sink j sits at slot j,
so it is seen at distance min(i, S + W - 1) - j, below S + W however long the text. Up to
S + W tokens nothing is evicted and attention is the model's own.
"""

from __future__ import annotations

import torch

from posexp import checks
from posexp.extension.attention import AttentionPlan, AttentionSpec, register_attention_method
from posexp.extension.settings import WINDOW_TEXT, Setting, below_length, positive_int_or_null


def non_negative_int(name: str, value: object) -> int:
    """An integer >= 0."""
    return checks.integer(name, value, low=0)


SETTINGS = (
    Setting("sinks", "S: an integer >= 0, the first tokens always kept", non_negative_int),
    Setting(
        "window",
        f"W: {WINDOW_TEXT}, the recent tokens kept (the query's own included); null = L0 - S",
        positive_int_or_null,
        null_means=lambda given, s, l0: max(1, l0 - given["sinks"]),
        at_length=below_length,
    ),
)


def streaming_llm(
    spec: AttentionSpec, *, sinks: int = 4, window: int | None = None
) -> AttentionPlan:
    """S sinks and a window of W recent keys (null: L0 - S), at cache-slot positions."""
    w = max(1, spec.original_length - sinks) if window is None else window
    last_slot = sinks + w - 1

    def classes(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        distance = q_pos[..., :, None] - k_pos[..., None, :]
        sink = (k_pos < sinks)[..., None, :].expand_as(distance)
        return torch.where(distance < w, 0, torch.where(sink, 1, -1))

    def slots(q_pos: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q_pos.clamp(max=last_slot), k_pos

    return AttentionPlan(classes=classes, rotations=(slots,), window_sinks=(w, sinks))


register_attention_method(
    "streaming_llm", acts_on="relative_positions", uses_factor=False, settings=SETTINGS
)(streaming_llm)
