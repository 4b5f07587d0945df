"""The attention kernels the model calls outside FlexAttention (``posexp/flex.py``): torch's
SDPA, with an encoding's bias added one query block at a time, and the explicit softmax that
also returns the weights (attention maps, and the reference the tests compare SDPA against)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posexp.pe import PositionalEncoding

# Queries are processed in blocks of this many when an additive bias goes through SDPA, so a long
# evaluation never holds a full (H, L, L) bias or score tensor, and each block attends only to
# the keys up to its end: SDPA cannot combine is_causal with a bias, and a full masked square
# costs about 2x the causal kernel. At 128 the masked work left is small (CPU training at seq
# 256: bias PEs at 0.93-1.0x RoPE's step rate, against 0.83x with blocks of 512).
BIAS_QUERY_CHUNK = 128


def causal_mask(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """True where query i may see key j (j's position <= i's); broadcastable to (B, H, Tq, Tk)."""
    mask = k_pos[..., None, :] <= q_pos[..., :, None]
    return mask[:, None] if mask.dim() == 3 else mask


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    pe: PositionalEncoding,
    dropout: float = 0.0,
    causal: bool = True,
) -> torch.Tensor:
    """Scaled dot-product attention through torch's SDPA kernels (causal unless told otherwise)."""
    Tq, Tk = q.shape[2], k.shape[2]
    if not causal:
        bias = pe.bias(q_pos, k_pos, q.dtype) if pe.has_bias else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
    if not pe.has_bias:
        if Tq == Tk and q_pos.dim() == 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_mask(q_pos, k_pos), dropout_p=dropout
        )
    # With a bias: one query block at a time, each seeing only the keys it may attend to.
    outputs = []
    for start in range(0, Tq, BIAS_QUERY_CHUNK):
        qp = q_pos[..., start : start + BIAS_QUERY_CHUNK]
        k_end = Tk if q_pos.dim() > 1 or Tq != Tk else min(Tk, start + BIAS_QUERY_CHUNK)
        kp = k_pos[..., :k_end]
        bias = pe.bias(qp, kp, q.dtype).masked_fill(~causal_mask(qp, kp), float("-inf"))
        outputs.append(
            F.scaled_dot_product_attention(
                q[:, :, start : start + BIAS_QUERY_CHUNK],
                k[:, :, :k_end],
                v[:, :, :k_end],
                attn_mask=bias,
                dropout_p=dropout,
            )
        )
    return torch.cat(outputs, dim=2)


def explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    pe: PositionalEncoding,
    causal: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QKᵀ/√d_k + bias) V written out, returning the weights too (for attention maps)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if pe.has_bias:
        scores = scores + pe.bias(q_pos, k_pos, scores.dtype)
    if causal:
        scores = scores.masked_fill(~causal_mask(q_pos, k_pos), float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
