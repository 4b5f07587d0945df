"""T5 relative position bias (Raffel et al. 2020): a learned scalar per head and distance bucket.

The logit of query i for key j gets ``table[bucket(i - j), head]``. Distances below
``num_buckets / 2`` have a bucket each; longer ones share log-spaced buckets up to
``max_distance``, and every distance beyond that falls in the last bucket, which is what lets
the bias extend to any length. Causal (unidirectional) bucketing, as in T5's decoder; one table
shared by all layers, as in T5.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from posexp.checks import integer
from posexp.errors import PosexpError
from posexp.pe.base import LogitTerm, PEContext, PositionalEncoding, register_pe


def relative_buckets(distance: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's causal bucket of each query-key distance i - j (negative distances go to bucket 0)."""
    n = distance.clamp(min=0)
    exact = num_buckets // 2
    # Clamped to 1 only so the log is defined where the exact branch is taken anyway.
    log_ratio = torch.log(n.float().clamp(min=1) / exact) / math.log(max_distance / exact)
    large = (exact + (log_ratio * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return torch.where(n < exact, n, large)


@register_pe("t5")
class T5Bias(PositionalEncoding):
    """Adds a learned per-head scalar, looked up by the bucket of i - j, to each logit."""

    kind = "bias"
    logit_term = LogitTerm.POSITION_BIAS
    bias_by_distance = True  # evaluation on the CPU reads it by distance (distance_bias)
    label, order, family = "T5 bias", 50, "relative bias"

    def __init__(self, ctx: PEContext, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__(ctx)
        exact = integer("pe.num_buckets", num_buckets, low=2) // 2
        if integer("pe.max_distance", max_distance) <= exact:
            raise PosexpError(
                f"pe.max_distance must be an integer > num_buckets / 2 = {exact}, "
                f"got {max_distance!r}"
            )
        self.num_buckets, self.max_distance = num_buckets, max_distance
        # T5 initialises the table with std d_model^-0.5 (a Parameter, so the model's own
        # initialisation of Linear/Embedding weights leaves it alone).
        self.table = nn.Parameter(torch.randn(num_buckets, ctx.n_heads) * ctx.d_model**-0.5)

    def far_bias(self) -> tuple[int, torch.Tensor]:
        """Every distance from ``max_distance`` on is in the last bucket."""
        return self.max_distance, self.table[self.num_buckets - 1]

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The (H, Tq, Tk) bias, or (B, H, Tq, Tk) for per-row positions."""
        buckets = relative_buckets(
            q_pos[..., :, None] - k_pos[..., None, :], self.num_buckets, self.max_distance
        )
        values = self.table[buckets].to(dtype)  # (..., Tq, Tk, H)
        return values.movedim(-1, -3)

    def score_mod(self, length: int | None = None) -> Callable[..., torch.Tensor]:
        """The table looked up per distance: every distance >= max_distance shares the last
        bucket, so max_distance + 1 values per head hold the whole bias."""
        distance = torch.arange(self.max_distance + 1, device=self.table.device)
        by_distance = self.table[
            relative_buckets(distance, self.num_buckets, self.max_distance)
        ].t()
        # The largest distance as a tensor, not a Python int: posexp/kernels/flex.py fixes the shapes of
        # captured tensors, while captured ints would become symbols of the compiled kernel.
        last = distance[-1]

        def t5_score(score, b, h, q_idx, kv_idx):
            return score + by_distance[h, torch.minimum((q_idx - kv_idx).clamp(min=0), last)]

        return t5_score
