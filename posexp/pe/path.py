"""PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating
Householder Transformations"): position information from data-dependent Householder transforms
between each key and query, with an optional forget gate (PaTH-FoX).

In each layer every token t gives each head a unit direction w_t and a strength β_t ∈ (0, 2):

    w_t = normalise(conv(W_w x)_t),   β_t = 2σ(W_β x_t + b),   H_t = I − β_t w_t w_tᵀ,

``conv`` a short causal depthwise convolution over the last ``pe.conv`` projected inputs (1: no
convolution). Query i scores key j ≤ i through the transforms of the tokens after j up to i,

    a_ij = q_iᵀ H_i H_{i−1} ⋯ H_{j+1} k_j / √d   (+ c_i − c_j under ``pe.forget_gate``),

then a causal softmax over j; the values are untouched. At β = 0 every H is I (NoPE); at β = 2 H
is a reflection, orthogonal like RoPE's rotations but chosen by the content.

Two exact O(L²·d) evaluations, and no d × d matrix is ever built:

* the full forward walks the query side: H is symmetric, so a_ij = (H_{j+1} ⋯ H_i q_i)·k_j, and at
  offset s = i − j every query of a chunk takes one Householder step u_i ← H_{i−s} u_i, all
  queries at once; chunks of QUERY_CHUNK queries keep memory O(chunk × L + L × d).
* decoding walks the key side: the cache holds keys carried to the last token,
  K_j = H_n ⋯ H_{j+1} k_j; a new token t applies H_t to each as a rank-one update
  K_j ← K_j − β_t (w_tᵀ K_j) w_t, appends k_t as it is, and scores q_t against them all.

Both compute in fp32 (float64 stays float64), also under bf16 autocast, and the cache keeps its
carried keys in fp32: bf16 rounding would otherwise pile up over thousands of updates.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posexp import checks
from posexp.pe.base import LogitTerm, PEContext, PositionalEncoding, append_cached, register_pe
from posexp.pe.fox import ForgetGate, running_log_forget, time_scale_bias

QUERY_CHUNK = 128  # queries per chunk, as posexp/model/attention.py: (chunk x L) tensors at most


def householder(x: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """H x = x − β (wᵀx) w for each vector of ``x`` (..., d); ``w`` (..., d), ``β`` (...) broadcast."""
    return x - (beta[..., None] * (x * w).sum(-1, keepdim=True)) * w


def _shifted(t: torch.Tensor, end: int, before: int) -> torch.Tensor:
    """Entries 0..end-1 of ``t`` along dim 2, after ``before`` zeros (H = I, no key there)."""
    pad = (0, 0, before, 0) if t.dim() == 4 else (before, 0)
    return F.pad(t[:, :, :end], pad)


def path_logits(
    q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor, start: int, end: int
) -> torch.Tensor:
    """q_iᵀ H_i ⋯ H_{j+1} k_j (unscaled) for queries start ≤ i < end and keys j < end, as
    (B, H, end − start, end), −inf where j > i: one Householder step per offset s = i − j."""
    n = end - start
    # Key i − s of the chunk's first query sits at index start − s + (n − 1) of the shifted
    # tensors; offsets past a query's own index read the zeros (never used below).
    kp, wp, bp = (_shifted(t, end, n - 1) for t in (k, w, beta))
    u = q[:, :, start:end]
    by_offset = []
    for s in range(end):
        lo = start - s + n - 1
        by_offset.append((u * kp[:, :, lo : lo + n]).sum(-1))
        if s + 1 < end:
            u = householder(u, wp[:, :, lo : lo + n], bp[:, :, lo : lo + n])
    scores = torch.stack(by_offset, -1)  # [..., i, s]: query i against key i − s
    offset = torch.arange(start, end, device=q.device)[:, None] - torch.arange(end, device=q.device)
    index = offset.clamp(min=0).expand(*scores.shape[:2], n, end)
    return scores.gather(-1, index).masked_fill(offset < 0, float("-inf"))


def path_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    beta: torch.Tensor,
    c: torch.Tensor | None = None,
    need_weights: bool = False,
    chunk: int = QUERY_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal PaTH attention over a whole sequence: ``q``, ``k``, ``v``, ``w`` (B, H, T, d), ``β``
    and the forget gate's running sum ``c`` (B, H, T) or None. Output (B, H, T, d) and, if asked,
    the weights (B, H, T, T); one chunk of queries at a time."""
    T, scale = q.shape[2], 1.0 / math.sqrt(q.shape[-1])
    outputs, weights = [], []
    for start in range(0, T, chunk):
        end = min(start + chunk, T)  # later keys are all masked for this chunk
        logits = path_logits(q, k, w, beta, start, end) * scale
        if c is not None:
            logits = logits + (c[:, :, start:end, None] - c[:, :, None, :end])
        p = logits.softmax(-1)
        outputs.append(p @ v[:, :, :end])
        if need_weights:
            weights.append(F.pad(p, (0, T - end)))
    return torch.cat(outputs, 2), torch.cat(weights, 2) if need_weights else None


def path_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    beta: torch.Tensor,
    keys: torch.Tensor | None,
    c_q: torch.Tensor | None = None,
    c_k: torch.Tensor | None = None,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Attention of Tq new tokens after ``keys`` (B, H, n, d), the cached keys carried to the last
    cached token (None: none), one token at a time; ``v`` and ``c_k`` hold every value and running
    sum (cached, then new). Returns the output, the weights (B, H, Tq, n + Tq) if asked, and the
    n + Tq keys carried to the last new token (the next cache)."""
    Tq, Tk, scale = q.shape[2], v.shape[2], 1.0 / math.sqrt(q.shape[-1])
    outputs, weights = [], []
    for t in range(Tq):
        new = k[:, :, t : t + 1]
        if keys is None:
            keys = new
        else:  # token t's transform reaches every earlier key; its own key enters as it is
            keys = torch.cat((householder(keys, w[:, :, t : t + 1], beta[:, :, t : t + 1]), new), 2)
        n = keys.shape[2]
        logits = (q[:, :, t : t + 1] @ keys.transpose(-2, -1)) * scale
        if c_q is not None and c_k is not None:
            logits = logits + (c_q[:, :, t : t + 1, None] - c_k[:, :, None, :n])
        p = logits.softmax(-1)
        outputs.append(p @ v[:, :, :n])
        if need_weights:
            weights.append(F.pad(p, (0, Tk - n)))
    assert keys is not None, "path_decode needs at least one new token"
    return torch.cat(outputs, 2), torch.cat(weights, 2) if need_weights else None, keys


class PaTHLayer(PositionalEncoding):
    """One layer's transforms (directions, strengths, optional forget gate) and its attention."""

    kind = "attention"
    logit_term = LogitTerm.OWN
    name = "path"

    def __init__(self, ctx: PEContext, conv: int, gate: ForgetGate | None) -> None:
        super().__init__(ctx)
        channels = ctx.n_heads * ctx.head_dim
        self.w_proj = nn.Linear(ctx.d_model, channels, bias=False)
        # Width 1 would only scale each channel, and w w^T undoes a sign: no parameter then.
        # Otherwise nn.Conv1d's default initialisation, as the reference's short convolution.
        self.conv = None
        if conv > 1:
            bound = 1.0 / math.sqrt(conv)
            self.conv = nn.Parameter(torch.empty(channels, conv).uniform_(-bound, bound))
        self.beta_proj = nn.Linear(ctx.d_model, ctx.n_heads)
        nn.init.zeros_(self.beta_proj.bias)  # β = 1 for a zero input
        self.gate = gate

    def directions(
        self, x: torch.Tensor, cache: dict[str, Any] | None, dtype: torch.dtype
    ) -> torch.Tensor:
        """Unit directions w (B, H, T, d) of ``x``'s tokens; with a cache, the convolution
        continues from the last width − 1 projected inputs it keeps (``path_conv``)."""
        B, T, _ = x.shape
        a = self.w_proj(x).to(dtype)  # (B, T, H·d)
        if self.conv is not None:
            width = self.conv.shape[1]
            previous = None if cache is None else cache.get("path_conv")
            if previous is None:  # the start of the sequence: zeros before it
                previous = a.new_zeros(B, width - 1, a.shape[-1])
            joined = torch.cat((previous, a), 1)
            if cache is not None:
                cache["path_conv"] = joined[:, -(width - 1) :].clone()
            weight = self.conv.to(dtype)
            # Output t mixes inputs t − width + 1 .. t: joined[t + m] is input t − width + 1 + m.
            a = sum(weight[:, m] * joined[:, m : m + T] for m in range(width))
        w = a.view(B, T, self.ctx.n_heads, self.ctx.head_dim)
        return F.normalize(w, dim=-1).transpose(1, 2)

    def strengths(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """β = 2σ(W_β x + b) ∈ (0, 2) per head and token, (B, H, T)."""
        return 2 * torch.sigmoid(self.beta_proj(x).to(dtype)).transpose(1, 2)

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
        """PaTH attention by index order (positions unused); with a cache: carried keys
        (``path_k``), values, the convolution's inputs and the gate's running sum, batch first."""
        dtype = torch.promote_types(q.dtype, torch.float32)
        w, beta = self.directions(x, cache, dtype), self.strengths(x, dtype)
        c_q = c_k = None
        if self.gate is not None:
            c_q, c_k = running_log_forget(self.gate(x), cache)
            c_q, c_k = c_q.to(dtype), c_k.to(dtype)
        q, k = q.to(dtype), k.to(dtype)
        with torch.autocast(q.device.type, enabled=False):  # matmuls in fp32 too
            if cache is None:
                y, weights = path_attention(q, k, v.to(dtype), w, beta, c_q, need_weights)
            else:
                values = append_cached(cache, "v", v).to(dtype)
                y, weights, keys = path_decode(
                    q, k, values, w, beta, cache.get("path_k"), c_q, c_k, need_weights
                )
                cache["path_k"] = keys
        return y.to(v.dtype), None if weights is None else weights.to(v.dtype)


@register_pe("path")
class PaTH(PositionalEncoding):
    """Householder transforms per head and layer (``layer(i)``); no other position information."""

    kind = "attention"
    logit_term = LogitTerm.OWN
    label, order, family = "PaTH", 85, "householder"

    @classmethod
    def label_for(cls, params: dict[str, Any]) -> str:
        """PaTH-FoX with the forget gate (the paper's name for the combination)."""
        return "PaTH-FoX" if params.get("forget_gate") else cls.label

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.conv`` a positive integer, ``pe.forget_gate`` true or false."""
        checks.positive_int("pe.conv", params.get("conv", 3))
        checks.boolean("pe.forget_gate", params.get("forget_gate", False))

    def __init__(self, ctx: PEContext, conv: int = 3, forget_gate: bool = False) -> None:
        super().__init__(ctx)
        self.check_params({"conv": conv, "forget_gate": forget_gate}, ctx.train_length)
        # PaTH-FoX: FoX's data gate, its bias from FoX's default time scales (1 .. training length).
        bias = time_scale_bias(ctx.n_heads, 1.0, float(ctx.train_length))
        self.layers = nn.ModuleList(
            PaTHLayer(
                ctx,
                conv,
                ForgetGate(ctx.d_model, ctx.n_heads, "data", bias) if forget_gate else None,
            )
            for _ in range(ctx.n_layers)
        )

    def layer(self, index: int) -> PositionalEncoding:
        """Layer ``index``'s transforms and attention."""
        return self.layers[index]
