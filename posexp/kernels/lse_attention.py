"""Attention that also returns each query's log-sum-exp, differentiably, and the merge of such
an attention with extra logits (a learned sink logit, sink keys scored apart).

Why: the softmax over the keys of one kernel call and a few more logits z_n with values u_n is

    out' = (e^lse · out + Σ e^z_n · u_n) / (e^lse + Σ e^z_n),

so a sink logit s (no value) is ``out · sigmoid(lse - s)`` and StreamingLLM's sinks, scored at
the method's positions, join a banded attention without an (L, L) score tensor. On the CPU the
kernel is the one SDPA runs (torch's flash attention for the CPU, which returns the
log-sum-exp); its backward ignores a gradient on the log-sum-exp, so ``_FlashWithLse`` folds it
in: d lse_i / d s_ij = p_ij adds g_i·p_ij to dS_ij = p_ij (dO_i·v_j − D_i), i.e. replaces
D_i = dO_i·out_i by D_i − g_i. The backward op computes D from the ``out`` and ``grad_out`` it is
handed, so one extra head column does it exactly: v gets a 0, ``out`` gets −g_i, ``grad_out``
gets 1 (and q, k a 0, which leaves the scores alone). Elsewhere (a GPU, float64, dropout, a
bias that is trained) the block is written out, which the callers keep to O(block × keys).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_FLASH_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _at_least_fp32(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def flash_runs(q: torch.Tensor, mask: torch.Tensor | None, dropout: float) -> bool:
    """True where torch's CPU flash kernel takes the call: a CPU tensor of a float type it
    supports, no dropout, and no additive mask that needs a gradient (the kernel gives none)."""
    return (
        q.device.type == "cpu"
        and q.dtype in _FLASH_DTYPES
        and dropout == 0.0
        and (mask is None or not mask.requires_grad)
        and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
    )


class _FlashWithLse(torch.autograd.Function):
    """torch's CPU flash attention as (out, lse), with the gradient of both (module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale):  # type: ignore[no-untyped-def]
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, attn_mask=mask, scale=scale
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.causal, ctx.scale = mask, causal, scale
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):  # type: ignore[no-untyped-def]
        q, k, v, out, lse = ctx.saved_tensors
        backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        args = (0.0, ctx.causal)
        kw = {"attn_mask": ctx.mask, "scale": ctx.scale}
        if grad_lse is None or not bool(grad_lse.any()):
            dq, dk, dv = backward(grad_out.contiguous(), q, k, v, out, lse, *args, **kw)
            return dq, dk, dv, None, None, None

        def pad(t: torch.Tensor, value: float = 0.0) -> torch.Tensor:
            return F.pad(t, (0, 1), value=value)

        extra = (-grad_lse).to(out.dtype).unsqueeze(-1)
        dq, dk, dv = backward(
            pad(grad_out, 1.0),
            pad(q),
            pad(k),
            pad(v),
            torch.cat([out, extra], dim=-1),
            lse,
            *args,
            **kw,
        )
        return dq[..., :-1], dk[..., :-1], dv[..., :-1], None, None, None


def attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QKᵀ/√d + mask) V for q (B, H, Tq, d), k, v (B, H, Tk, d) and its log-sum-exp
    (B, H, Tq) in float32 (float64 for float64 inputs); ``mask``: additive (0 or -inf, plus any bias), broadcastable to
    (B, H, Tq, Tk); ``causal``: query i sees keys 0..i as well. Every query must see a key."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    if flash_runs(q, mask, dropout):
        if mask is not None:
            mask = mask.to(q.dtype)
            if mask.dim() == 3:  # (H, Tq, Tk): the kernel takes 2 or 4 dims
                mask = mask.unsqueeze(0)
        out, lse = _FlashWithLse.apply(q, k, v, mask, causal, scale)
        return out, lse.to(_at_least_fp32(q.dtype))
    scores = (q @ k.transpose(-2, -1)).to(_at_least_fp32(q.dtype)) * scale
    if mask is not None:
        scores = scores + mask
    if causal:
        Tq, Tk = q.shape[2], k.shape[2]
        hidden = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(hidden, float("-inf"))
    lse = scores.logsumexp(dim=-1)
    probs = (scores - lse[..., None]).exp()
    if dropout:
        probs = F.dropout(probs, dropout)
    return probs.to(v.dtype) @ v, lse


def merge_extra_logits(
    out: torch.Tensor,
    lse: torch.Tensor,
    scores: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    sink_logit: torch.Tensor | None = None,
) -> torch.Tensor:
    """One softmax over an attention's keys (its ``out`` (B, H, Tq, d) and ``lse`` (B, H, Tq))
    and extra logits: ``scores`` (B, H, Tq, n) over ``values`` (B, H, n, d) (-inf: hidden), and
    a per-head ``sink_logit`` (H,) that takes mass and gives no value."""
    dtype = _at_least_fp32(out.dtype)
    if scores is None and sink_logit is not None:
        # out · e^lse / (e^lse + e^s)
        sink = sink_logit.to(dtype).view(1, -1, 1)
        return out * torch.sigmoid(lse - sink).unsqueeze(-1).to(out.dtype)
    logits = [lse.unsqueeze(-1)]
    if scores is not None:
        logits.append(scores.to(dtype))
    if sink_logit is not None:
        logits.append(sink_logit.to(dtype).view(1, -1, 1, 1).expand(*lse.shape, 1))
    every = torch.cat(logits, dim=-1)
    # The largest logit is finite: the attention's own lse always is.
    weights = (every - every.amax(dim=-1, keepdim=True).detach()).exp()
    total = weights.sum(dim=-1, keepdim=True)
    merged = weights[..., :1] * out.to(dtype)
    if scores is not None:
        assert values is not None
        n = scores.shape[-1]
        merged = merged + weights[..., 1 : 1 + n] @ values.to(dtype)
    return (merged / total).to(out.dtype)
