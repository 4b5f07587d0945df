"""ALiBi (Press et al. 2022): a per-head linear penalty on query-key distance, no embeddings."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from posexp.pe.base import LogitTerm, PEContext, PositionalEncoding, register_pe


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Per-head slopes: geometric from 2^(-8/n); for non-powers of 2, the paper's interleaving."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads & (n_heads - 1) == 0:
        return torch.tensor(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    # The extra heads take every other slope of the next power of two, so slopes interleave.
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


@register_pe("alibi")
class ALiBi(PositionalEncoding):
    """Adds -slope_h * (i - j) to the logit of query i attending to key j."""

    kind = "bias"
    logit_term = LogitTerm.POSITION_BIAS
    bias_by_distance = True  # evaluation on the CPU reads it by distance (distance_bias)
    label, order, family = "ALiBi", 40, "relative bias"

    def __init__(self, ctx: PEContext) -> None:
        super().__init__(ctx)
        self.register_buffer("slopes", alibi_slopes(ctx.n_heads), persistent=False)

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Return -slope_h * (q - k), shape (H, Tq, Tk) or (B, H, Tq, Tk) for per-row positions."""
        distance = (q_pos[..., :, None] - k_pos[..., None, :]).to(dtype)
        if distance.dim() == 3:  # per-row positions: (B, Tq, Tk) -> (B, H, Tq, Tk)
            return -self.slopes.to(dtype)[None, :, None, None] * distance[:, None]
        return -self.slopes.to(dtype)[:, None, None] * distance

    def score_mod(self, length: int | None = None) -> Callable[..., torch.Tensor]:
        """-slope_h * (q - k), added to each logit inside the attention kernel."""
        slopes = self.slopes

        def alibi_score(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx)

        return alibi_score
