"""Scalable-Softmax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention"): the logits of a
query that attends over n keys are multiplied by s·ln n, so softmax keeps its focus as n grows
(softmax over z·s·ln n equals n^(s·z) normalised). Applied to the query vector, per head.

s is learned per layer and head (initial value ``attention.ssmax``; the paper's figure uses
0.43); the optional bias variant learns b too, factor s·ln n + b (``attention.ssmax_bias``; s = 0,
b = 1 is plain attention). n is the number of keys a causal query at position p sees: p + 1, or at
most the window (plus its sinks) in a windowed layer.
"""

from __future__ import annotations

import torch
from torch import nn


class QueryLengthScale(nn.Module):
    """The factor s·ln n (+ b) per head and query, learned s (H,) and optional b (H,)."""

    def __init__(self, n_heads: int, s: float, bias: float | None = None) -> None:
        super().__init__()
        self.s = nn.Parameter(torch.full((n_heads,), float(s)))
        self.b = None if bias is None else nn.Parameter(torch.full((n_heads,), float(bias)))

    def factor(self, q_pos: torch.Tensor, seen: int | None = None) -> torch.Tensor:
        """(H, T) for positions (T,), or (B, H, T) for per-row positions (B, T); ``seen``: the
        most keys a query sees (a window), None: every earlier one."""
        n = (q_pos + 1).float()
        if seen is not None:
            n = n.clamp(max=seen)
        f = self.s[:, None] * n.log()[..., None, :]
        return f if self.b is None else f + self.b[:, None]

    def forward(
        self, q: torch.Tensor, q_pos: torch.Tensor, seen: int | None = None
    ) -> torch.Tensor:
        """Queries (B, H, T, d) times their factor."""
        return q * self.factor(q_pos, seen)[..., None].to(q.dtype)
