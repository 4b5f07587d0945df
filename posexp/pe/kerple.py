"""Kerple (Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length
Extrapolation"): a learned, conditionally positive definite kernel of distance per head,
added to the attention logits.

Two variants (``pe.variant``), for query i and key j at distance d = |i - j|:

* ``log``:   -r1_h · log(1 + r2_h · d)   (the paper's best);
* ``power``: -r1_h · d^r2_h, with 0 < r2_h <= 2.

r1 and r2 are learned per head and kept in range by clamping where they are used (r >= 0.01,
and r2 <= 2 for the power kernel), as the authors' code does. They start at r1 = 1 and r2
spread over the heads geometrically, from 1 down to 1/2 (log) or from 2 down to 1/2 (power), so
the heads begin with different reach. One kernel is shared by every layer, as
posexp does with T5's table and FIRE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from posexp.errors import PosexpError
from posexp.pe.base import LogitTerm, PEContext, PositionalEncoding, register_pe

VARIANTS = ("log", "power")
EPS = 0.01  # the smallest r1, r2 kept (a zero r2 would make the kernel constant)


def kerple_bias(distance: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, variant: str):
    """The kernel at ``distance`` (..., Tq, Tk) for per-head r1, r2 (H,): shape (..., H, Tq, Tk)."""
    d = distance.abs().float()[..., None, :, :]
    a, b = r1[:, None, None], r2[:, None, None]
    return -a * torch.log1p(b * d) if variant == "log" else -a * d.pow(b)


@register_pe("kerple")
class Kerple(PositionalEncoding):
    """Adds a learned log or power kernel of |i - j| per head to each logit."""

    kind = "bias"
    logit_term = LogitTerm.POSITION_BIAS
    bias_by_distance = True  # evaluation on the CPU reads it by distance (distance_bias)
    label, order, family = "Kerple", 55, "relative bias"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.variant`` is log or power, checked with the config."""
        if params.get("variant", "log") not in VARIANTS:
            raise PosexpError(
                f"pe.variant must be one of {', '.join(VARIANTS)}, got {params['variant']!r}"
            )

    def __init__(self, ctx: PEContext, variant: str = "log") -> None:
        super().__init__(ctx)
        self.check_params({"variant": variant}, ctx.train_length)
        self.variant = variant
        h = ctx.n_heads
        top = 1.0 if variant == "log" else 2.0
        spread = torch.logspace(0, -1 if variant == "log" else -2, h, base=2.0) if h > 1 else None
        self.r1 = nn.Parameter(torch.ones(h))
        self.r2 = nn.Parameter(top * spread if spread is not None else torch.full((h,), top))

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """r1, r2 clamped to their ranges (the gradient stops where a clamp holds)."""
        r2 = self.r2.clamp(min=EPS, max=2.0) if self.variant == "power" else self.r2.clamp(min=EPS)
        return self.r1.clamp(min=EPS), r2

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The (H, Tq, Tk) bias, or (B, H, Tq, Tk) for per-row positions."""
        distance = q_pos[..., :, None] - k_pos[..., None, :]
        return kerple_bias(distance, *self.coefficients(), self.variant).to(dtype)

    def score_mod(self, length: int | None = None) -> Callable[..., torch.Tensor]:
        """The same kernel per score inside the attention kernel (each capture indexed once)."""
        r1, r2 = self.coefficients()
        if self.variant == "log":

            def kerple_log(score, b, h, q_idx, kv_idx):
                return score - r1[h] * torch.log1p(r2[h] * (q_idx - kv_idx).abs())

            return kerple_log

        def kerple_power(score, b, h, q_idx, kv_idx):
            return score - r1[h] * torch.pow((q_idx - kv_idx).abs().float(), r2[h])

        return kerple_power
