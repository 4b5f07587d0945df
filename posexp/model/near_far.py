"""Attention split by distance into a near band and a far part, merged by log-sum-exp.

Two kinds of attention score a pair one way when query and key are close and another way past
a distance ``w``: the training-free methods that remap far positions (Self-Extend, ReRoPE:
two rotations), and biases that stop changing with distance (T5: one bucket, a constant per
head, from ``max_distance`` on). Past ``w`` the pairs of query i are the keys j <= i - w: with
the queries shifted by w that is plain causal attention (queries w.., keys ..T-w), one call of
torch's CPU flash kernel with no mask and no bias. The near pairs (0 <= i - j < w) are a band,
one chunk of queries at a time over its chunk + w keys with the bias as the mask. The kernel
also returns each row's log-sum-exp, so the two softmaxes merge exactly:
out = (e^lse_near o_near + e^lse_far o_far) / (e^lse_near + e^lse_far).
Memory O(T x (chunk + w)), never T x T. Where it runs: the CPU, no gradient, query and key
positions one run of consecutive integers (evaluation, prompts); elsewhere the chunked paths
of ``posexp.model.attention``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

CHUNK = 128  # queries per near-band call (at least w)
BandBias = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (q_pos, k_pos) -> (H, Tq, Tk)


def applies(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    *weights: torch.Tensor,
) -> bool:
    """Whether ``attention`` can run: the CPU (its flash kernel returns the log-sum-exp), no
    gradient for q, k, v or the bias ``weights``, and query and key positions one shared run of
    consecutive integers."""
    if q.device.type != "cpu" or q_pos.dim() != 1 or not torch.equal(q_pos, k_pos):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *weights)):
        return False
    return q.shape[2] == k.shape[2] and bool((q_pos.diff() == 1).all())


def flash_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QKᵀ + mask) V and each query's log-sum-exp, from torch's CPU flash kernel; the
    queries carry the 1/√d scale already."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, is_causal, attn_mask=mask, scale=1.0
    )


def attention(
    q_near: torch.Tensor,
    k_near: torch.Tensor,
    q_far: torch.Tensor,
    k_far: torch.Tensor,
    v: torch.Tensor,
    window: int,
    near_bias: BandBias | None = None,
    far_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of positions 0..T-1 whose pairs closer than ``window`` score
    q_near·k_near (+ ``near_bias``) and the others q_far·k_far (+ ``far_bias``, one per head)."""
    T = q_near.shape[2]
    chunk = max(CHUNK, window)
    near_out, near_lse = [], []
    for start in range(0, T, chunk):
        end, k_start = min(start + chunk, T), max(0, start - window + 1)
        qp, kp = torch.arange(start, end), torch.arange(k_start, end)
        distance = qp[:, None] - kp[None, :]
        outside = (distance < 0) | (distance >= window)
        if near_bias is None:
            mask = torch.zeros(distance.shape, dtype=q_near.dtype)
        else:
            mask = near_bias(qp, kp).to(q_near.dtype)[None]
        o, lse = flash_with_lse(
            q_near[:, :, start:end],
            k_near[:, :, k_start:end],
            v[:, :, k_start:end],
            mask=mask.masked_fill(outside, float("-inf")),
        )
        near_out.append(o)
        near_lse.append(lse)
    out, lse = torch.cat(near_out, dim=2), torch.cat(near_lse, dim=2)
    if T <= window:
        return out
    far_out, far_lse = flash_with_lse(
        q_far[:, :, window:], k_far[:, :, : T - window], v[:, :, : T - window], is_causal=True
    )
    if far_bias is not None:  # a constant per head: it only moves the far part's log-sum-exp
        far_lse = far_lse + far_bias.to(far_lse.dtype).view(1, -1, 1)
    wide = torch.promote_types(v.dtype, torch.float32)  # bf16 outputs merge in fp32
    near_share = torch.sigmoid(lse[:, :, window:] - far_lse)[..., None].to(wide)
    merged = far_out.to(wide).lerp_(out[:, :, window:].to(wide), near_share)
    out[:, :, window:] = merged.to(out.dtype)
    return out
