"""Sandwich (Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the Lens of
Receptive Field Analysis"): a parameter-free logit bias from sinusoidal position vectors.

The inner product of two d'-dimensional sinusoidal position vectors, with frequencies
ω_i = 10000^(-2i/d') for i = 1 .. d'/2, depends only on their distance:
p_m·p_n = Σ_i cos((m - n)·ω_i). Sandwich adds it to the logits, shifted so that distance 0
costs nothing and compressed per head h = 1 .. H like ALiBi's slopes:

    b_h(m, n) = (Σ_{i=1..d'/2} cos((m - n)·ω_i) - d'/2) · H / (8h)

The sum is at most d'/2, so every bias is <= 0; it falls with distance at first (the fast
frequencies decorrelate) and flattens as the slow ones take over. It is computed once per
distance into a table of 65,536 entries (a longer input is refused), which the attention kernel
and the explicit bias both read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from posexp import checks
from posexp.errors import PosexpError
from posexp.pe.base import LogitTerm, PEContext, PositionalEncoding, PositionOutOfRange, register_pe

TABLE_SIZE = 65536  # distances 0 .. 65,535


def sandwich_profile(distances: torch.Tensor, dim: int) -> torch.Tensor:
    """Σ_{i=1..dim/2} cos(Δ·10000^(-2i/dim)) - dim/2 for each distance Δ (float64)."""
    omega = 10000.0 ** (-2.0 * torch.arange(1, dim // 2 + 1, dtype=torch.float64) / dim)
    return torch.cos(distances.double()[..., None] * omega).sum(-1) - dim / 2


@register_pe("sandwich")
class Sandwich(PositionalEncoding):
    """Adds the per-head compressed sinusoidal inner product of query and key positions."""

    kind = "bias"
    logit_term = LogitTerm.POSITION_BIAS
    bias_by_distance = True  # evaluation on the CPU reads it by distance (distance_bias)
    label, order, family = "Sandwich", 57, "relative bias"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.dim`` a positive even integer, checked with the config."""
        if "dim" in params:
            d = checks.positive_int("pe.dim", params["dim"])
            if d % 2:
                raise PosexpError(f"pe.dim must be a positive even integer, got {d}")

    def __init__(self, ctx: PEContext, dim: int = 128) -> None:
        super().__init__(ctx)
        self.check_params({"dim": dim}, ctx.train_length)
        self.dim = dim
        heads = torch.arange(1, ctx.n_heads + 1, dtype=torch.float64)
        scales = ctx.n_heads / (8.0 * heads)  # H / (8h)
        table = scales[:, None] * sandwich_profile(torch.arange(TABLE_SIZE), dim)[None, :]
        self.register_buffer("table", table.float(), persistent=False)  # (H, TABLE_SIZE)

    @property
    def max_positions(self) -> int | None:
        """Distances the table holds."""
        return TABLE_SIZE

    def prepare(self, length: int, device: torch.device) -> None:
        """Refuses inputs longer than the table."""
        if length > TABLE_SIZE:
            raise PositionOutOfRange(
                f"sandwich holds {TABLE_SIZE:,} positions, got {length:,}",
                reason=f"sandwich holds {TABLE_SIZE:,} positions",
            )

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """b_h(q, k), shape (H, Tq, Tk) or (B, H, Tq, Tk); future keys (masked) read distance 0."""
        distance = (q_pos[..., :, None] - k_pos[..., None, :]).clamp(min=0)
        bias = self.table[:, distance].to(dtype)  # (H, ..., Tq, Tk)
        return bias.movedim(0, 1) if distance.dim() == 3 else bias

    def score_mod(self, length: int | None = None) -> Callable[..., torch.Tensor]:
        """The same table, read inside the attention kernel."""
        table = self.table

        def sandwich_score(score, b, h, q_idx, kv_idx):
            return score + table[h, torch.clamp(q_idx - kv_idx, min=0)]

        return sandwich_score
