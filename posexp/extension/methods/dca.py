"""Dual Chunk Attention (An et al. 2024, "Training-Free Long-Context Scaling of Large Language
Models", ChunkLlama).

Positions restart every c = chunk - local tokens: a key at j sits at j mod c. A query at i sits
at i mod c against keys of its own chunk (intra: the true distance i - j), at
min(i mod c + c, chunk) against the chunk before (successive: the true distance while
i mod c <= local, then capped), and at ``chunk`` against older chunks (inter: distances
chunk - (j mod c), in [local + 1, chunk]). No distance exceeds ``chunk`` (< L0). Up to c tokens
everything is one chunk and attention is the model's own. Defaults from ChunkLlama's code:
chunk = 3·L0/4, local = L0/8.
"""

from __future__ import annotations

import torch

from posexp.errors import PosexpError
from posexp.extension.attention import AttentionPlan, AttentionSpec, register_attention_method
from posexp.extension.settings import Setting, below_length, positive_int_or_null

SETTINGS = (
    Setting(
        "chunk",
        "s: an integer in [1, L0 - 1], the largest distance; null = 3·L0/4",
        positive_int_or_null,
        null_means=lambda given, s, l0: 3 * l0 // 4,
        at_length=below_length,
    ),
    Setting(
        "local",
        "w: an integer with 2w < s, the successive chunk's exact band; null = L0/8",
        positive_int_or_null,
        null_means=lambda given, s, l0: max(1, l0 // 8),
    ),
)


def dca(
    spec: AttentionSpec, *, chunk: int | None = None, local: int | None = None
) -> AttentionPlan:
    """Chunks of c = s - w positions (s null: 3·L0/4; w null: L0/8), three position maps."""
    l0 = spec.original_length
    s = 3 * l0 // 4 if chunk is None else chunk
    w = max(1, l0 // 8) if local is None else local
    below_length("extension.chunk", s, l0)
    if not 2 * w < s:
        raise PosexpError(
            f"extension.local must be below chunk / 2 = {s / 2:g} (the chunk length c = "
            f"chunk - local must exceed local), got {w}"
        )
    c = s - w

    def classes(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        q_chunk = torch.div(q_pos, c, rounding_mode="floor")[..., :, None]
        k_chunk = torch.div(k_pos, c, rounding_mode="floor")[..., None, :]
        return torch.where(q_chunk == k_chunk, 0, torch.where(k_chunk == q_chunk - 1, 1, 2))

    def successive(q_pos: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (q_pos % c + c).clamp(max=s), k_pos % c

    def inter(q_pos: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full_like(q_pos, s), k_pos % c

    return AttentionPlan(classes=classes, rotations=(successive, inter))


register_attention_method(
    "dca", acts_on="relative_positions", uses_factor=False, settings=SETTINGS
)(dca)
