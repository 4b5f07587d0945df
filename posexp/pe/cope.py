"""CoPE (Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count What's
Important"): positions counted by the content, not by the token index.

For query i and key j <= i a gate g_ij = σ(q_i·k_j / √d) says whether key j "counts"; the
position of j seen from i is the number of counting keys from j to i, p_ij = Σ_{t=j..i} g_it (a
reverse cumulative sum over the keys), capped at ``npos_max`` - 1. Each head dimension has a
learned embedding e[p] for the integers p = 0 .. npos_max - 1, interpolated between the two
nearest integers, and the logit gains q_i·e[p_ij]:

    a_ij = q_i·k_j / √d + q_i·e[p_ij],   q_i·e[p] = (p - ⌊p⌋)·z_i[⌈p⌉] + (1 - p + ⌊p⌋)·z_i[⌊p⌋]

with z_i[n] = q_i·e[n] computed once per query for the integers (the paper's efficient form).
The table starts at zero (CoPE then adds nothing), as in the paper, and one table is shared by
every layer, as posexp does with T5's table and FIRE. It is O(L²) by nature: attention runs one
block of 128 queries at a time (``posexp.model.attention.content_attention``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posexp import checks
from posexp.pe.base import LogitTerm, PEContext, PositionalEncoding, register_pe


@register_pe("cope")
class CoPE(PositionalEncoding):
    """Adds q·e[p] with p the gated count of keys between key and query (interpolated)."""

    kind = "content"
    logit_term = LogitTerm.FROM_SCORES
    label, order, family = "CoPE", 65, "contextual"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.npos_max`` a positive integer, checked with the config."""
        if "npos_max" in params:
            checks.positive_int("pe.npos_max", params["npos_max"])

    def __init__(self, ctx: PEContext, npos_max: int = 64) -> None:
        super().__init__(ctx)
        self.npos_max = checks.positive_int("pe.npos_max", npos_max)
        self.table = nn.Parameter(torch.zeros(ctx.head_dim, self.npos_max))

    def counts(self, scores: torch.Tensor) -> torch.Tensor:
        """p_ij: the gates σ(score) summed from key j to the query, capped at npos_max - 1."""
        gates = torch.sigmoid(scores)  # a masked (-inf) key counts 0
        return gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.npos_max - 1)

    def score_bias(self, q: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """q_i·e[p_ij], e interpolated linearly between the integers around p_ij."""
        pos = self.counts(scores)
        z = q @ self.table.to(q.dtype)  # (B, H, Tq, npos_max): q·e[n] for every integer n
        floor = pos.floor()
        frac = pos - floor
        lo = z.gather(-1, floor.long())
        hi = z.gather(-1, pos.ceil().long())
        return hi * frac + lo * (1 - frac)
