"""Stick-breaking attention (Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention"): no
softmax and no position information; recency comes from the order in which keys claim weight.

With z_ij = q_i·k_j/√d and β_ij = σ(z_ij), the keys before query i break a stick of length 1,
nearest first: key j takes the fraction β_ij of what the keys between it and the query left,

    A_ij = β_ij · Π_{j<k<i} (1 − β_ik),   y_i = Σ_j A_ij v_j,

computed in log space, log A_ij = log σ(z_ij) + Σ_{j<k<i} log σ(−z_ik): a reverse cumulative
sum over the keys, in fp32 also under bf16 autocast. By default (``pe.attend_current: false``,
the reference's) query i sees the keys j < i only; with true, key i itself breaks first (the
product then runs over j < k ≤ i). The weights sum to at most 1; the leftover
1 − Σ_j A_ij = Π_j (1 − β_ij) goes to the query's own value v_i (``pe.leftover: self``, as the
authors' models do) or is dropped (``drop``, as flash-linear-attention's layer does).

O(L²) by nature: one chunk of queries at a time over the keys up to its end, so memory is
O(chunk × L) at any length; with a KV cache the keys and values are cached as usual.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from posexp import checks
from posexp.errors import choose
from posexp.pe.base import LogitTerm, PEContext, PositionalEncoding, append_cached, register_pe

LEFTOVERS = ("self", "drop")
QUERY_CHUNK = 128  # queries per chunk, as posexp/model/attention.py: (chunk x L) tensors at most


def stick_breaking_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    leftover: str = "self",
    attend_current: bool = False,
    need_weights: bool = False,
    chunk: int = QUERY_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stick-breaking attention of ``q`` (B, H, Tq, d) over ``k``, ``v`` (B, H, Tk, d); the
    last Tq keys are the queries' own. Returns the output and, if asked, the weights on the
    values (B, H, Tq, Tk), the leftover included on the query's own key under ``self``."""
    Tq, Tk = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    aligned = Tq == Tk and q_pos.dim() == 1 and k_pos.dim() == 1
    own = Tk - Tq  # query i's own key and value sit at index own + i
    outputs, weights = [], []
    for start in range(0, Tq, chunk):
        end = min(start + chunk, Tq)
        k_end = end if aligned else Tk  # aligned: every later key is masked anyway
        qp, kp = q_pos[..., start:end, None], k_pos[..., None, :k_end]
        visible = kp <= qp if attend_current else kp < qp
        if visible.dim() == 3:  # per-row positions: a head axis
            visible = visible[:, None]
        z = q[:, :, start:end] @ k[:, :, :k_end].transpose(-2, -1)
        z = z.to(torch.promote_types(z.dtype, torch.float32)) * scale  # bf16: sums in fp32
        log_keep = F.logsigmoid(-z).masked_fill(~visible, 0.0)  # log(1 − β); masked: keeps all
        # Σ_{k ≥ j} log(1 − β_ik), summed from the query's side so the near keys are exact.
        kept_from = log_keep.flip(-1).cumsum(-1).flip(-1)
        kept_after = F.pad(kept_from[..., 1:], (0, 1))  # Σ_{k > j}: shifted, not subtracted
        w = (F.logsigmoid(z) + kept_after).masked_fill(~visible, float("-inf")).exp()
        y = w.to(v.dtype) @ v[:, :, :k_end]
        if leftover == "self":
            # What no key took, Π_j (1 − β_ij) = exp(Σ_j log(1 − β_ij)), on the query's value.
            rest = kept_from[..., 0].exp()
            y = y + rest[..., None].to(v.dtype) * v[:, :, own + start : own + end]
        outputs.append(y)
        if need_weights:
            full = w.clone()
            if leftover == "self":
                full.diagonal(own + start, -2, -1).add_(rest)
            weights.append(F.pad(full, (0, Tk - k_end)).to(q.dtype))
    return torch.cat(outputs, 2), torch.cat(weights, 2) if need_weights else None


@register_pe("stick_breaking")
class StickBreaking(PositionalEncoding):
    """Weights A_ij = σ(z_ij) Π_{j<k<i} (1 − σ(z_ik)): the nearest keys claim attention first."""

    kind = "attention"
    logit_term = LogitTerm.OWN
    label, order, family = "Stick-breaking", 75, "stick-breaking"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.leftover`` self or drop, ``pe.attend_current`` a boolean."""
        choose("pe.leftover", params.get("leftover", "self"), LEFTOVERS)
        checks.boolean("pe.attend_current", params.get("attend_current", False))

    def __init__(
        self, ctx: PEContext, leftover: str = "self", attend_current: bool = False
    ) -> None:
        super().__init__(ctx)
        self.check_params({"leftover": leftover, "attend_current": attend_current}, 0)
        self.leftover, self.attend_current = leftover, attend_current

    def own_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        x: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        state: Any = None,
        cache: dict[str, Any] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Stick-breaking attention over the cached and new keys (cached here when decoding)."""
        if cache is not None:
            k, v = append_cached(cache, "k", k), append_cached(cache, "v", v)
        return stick_breaking_attention(
            q, k, v, q_pos, k_pos, self.leftover, self.attend_current, need_weights
        )
