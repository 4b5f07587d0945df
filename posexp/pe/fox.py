"""FoX, the Forgetting Transformer (Lin et al., ICLR 2025): softmax attention with a forget gate.

Each head of each layer has a forget gate f_t = σ(w_fᵀx_t + b_f) ∈ (0, 1) on the layer's input,
and query i's logit for key j gains Σ_{l=j+1..i} log f_l = c_i − c_j with c_t = Σ_{l≤t} log f_l:
a data-dependent decay, always ≤ 0, and no other position information (no RoPE). Gate variants
(``pe.gate``): ``data`` (the paper's), ``bias`` (a learned constant per head: a learned ALiBi
slope, −log σ(b_h)) and ``fixed`` (that constant frozen at its initial value).

The bias b_h starts from a time scale T_h, log-spaced over heads between ``pe.time_scale_min``
and ``pe.time_scale_max`` (null: the training length): b_h = −log(expm1(1/T_h)), so that
σ(b_h) = exp(−1/T_h) and a head with zero input forgets over about T_h tokens.

For one sequence from its start, a kernel adds the bias inside attention: evaluating on a CPU,
posexp's own (``posexp.kernels.cpp_bias``, reading c per key); otherwise FlexAttention, by a
score_mod reading c (``posexp.kernels.flex.use_gate_flex``; one compilation serves every
length): on a GPU, training included, once the first batch with gradients has matched SDPA's
gradients (``gate_gradient_gap``; else FoX trains on SDPA, with one warning), and on the CPU
where posexp's kernel cannot run, evaluation of 1,024+ tokens (no CPU backward). Elsewhere (CPU training, short sequences, decoding
steps, ``attention=sdpa``), SDPA adds it one chunk of queries at a time (or, training in bf16
where the run chose it, ``posexp.kernels.matmul_attention`` adds it whole), so memory stays
O(chunk × L) at any length; with a KV cache the running sum c is cached with the keys. The gate's
kernel is compiled apart from the position biases': if it fails, FoX alone falls back to SDPA.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posexp import checks
from posexp.errors import PosexpError, choose
from posexp.kernels import cpp_bias, flex, matmul_attention
from posexp.pe.base import (
    LogitTerm,
    PEContext,
    PositionalEncoding,
    append_cached,
    cached,
    register_pe,
)

GATES = ("data", "bias", "fixed")
QUERY_CHUNK = 128  # queries per SDPA call: a (chunk x L) bias at most, whatever the length


def time_scale_bias(n_heads: int, t_min: float, t_max: float) -> torch.Tensor:
    """b_h = −log(expm1(1/T_h)) for T_h log-spaced from t_min to t_max: σ(b_h) = exp(−1/T_h)."""
    scales = torch.logspace(math.log10(t_min), math.log10(t_max), n_heads, dtype=torch.float64)
    return -torch.log(torch.expm1(1.0 / scales)).float()


class ForgetGate(nn.Module):
    """log f_t per head (B, H, T), fp32, ≤ 0: one layer's forget gate (FoX, PaTH-FoX)."""

    def __init__(self, d_model: int, n_heads: int, gate: str, bias: torch.Tensor) -> None:
        super().__init__()
        self.gate = gate
        if gate == "data":
            self.proj = nn.Linear(d_model, n_heads, bias=False)
        self.bias = nn.Parameter(bias.clone(), requires_grad=gate != "fixed")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """log σ(w·x_t + b) for every head and token of ``x`` (B, T, d_model)."""
        logits = self.bias.view(1, -1, 1).expand(x.shape[0], -1, x.shape[1])
        if self.gate == "data":
            logits = logits + self.proj(x).float().transpose(1, 2)
        return F.logsigmoid(logits.float())


def running_log_forget(
    log_f: torch.Tensor, cache: dict[str, Any] | None, key: str = "forget"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(c for the new queries (B, H, Tq), c for every key (B, H, Tk)): the running sum of
    ``log_f``, continued from (and appended to) the cache's when decoding."""
    c = log_f.cumsum(-1)
    if cache is None:
        return c, c
    previous = cached(cache, key)
    if previous is not None:
        c = c + previous[..., -1:]
    return c, append_cached(cache, key, c)


def gated_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    c_q: torch.Tensor,
    c_k: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q·k/√d + c_i − c_j) V under the causal mask, one chunk of queries at a time."""
    aligned = q.shape[2] == k.shape[2] and q_pos.dim() == 1
    outputs, weights = [], []
    for start in range(0, q.shape[2], QUERY_CHUNK):
        end = min(start + QUERY_CHUNK, q.shape[2])
        k_end = end if aligned else k.shape[2]  # aligned: later keys are all masked
        qp, kp = q_pos[..., start:end], k_pos[..., :k_end]
        visible = kp[..., None, :] <= qp[..., :, None]
        if visible.dim() == 3:
            visible = visible[:, None]
        bias = (c_q[:, :, start:end, None] - c_k[:, :, None, :k_end]).masked_fill(
            ~visible, float("-inf")
        )
        qc, kc, vc = q[:, :, start:end], k[:, :, :k_end], v[:, :, :k_end]
        if need_weights:
            scores = qc @ kc.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias.to(q.dtype)
            w = scores.softmax(-1)
            outputs.append(w @ vc)
            weights.append(F.pad(w, (0, k.shape[2] - k_end)))
        else:
            outputs.append(F.scaled_dot_product_attention(qc, kc, vc, attn_mask=bias.to(q.dtype)))
    return torch.cat(outputs, 2), torch.cat(weights, 2) if need_weights else None


class FoXLayer(PositionalEncoding):
    """One layer's forgetting attention: its gate, and attention with the gate's decay."""

    kind = "attention"
    logit_term = LogitTerm.OWN
    name = "fox"

    def __init__(self, ctx: PEContext, gate: ForgetGate) -> None:
        super().__init__(ctx)
        self.gate = gate

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
        """Attention with the forget gate's bias c_i − c_j; c, keys and values cached."""
        c_q, c_k = running_log_forget(self.gate(x), cache)
        if cache is not None:
            k, v = append_cached(cache, "k", k), append_cached(cache, "v", v)
        # One sequence from its start (nothing cached before): FlexAttention where it pays.
        whole = q.shape[2] == k.shape[2] > 1 and q_pos.dim() == 1 and not need_weights
        if whole and cpp_bias.wanted(self.kernels.bias, q.device, torch.is_grad_enabled(), 0.0):
            y = cpp_bias.causal_gated_attention(q, k, v, c_q)  # evaluating on a CPU
            if y is not None:
                return y, None
        if whole and flex.use_gate_flex(self.kernels.bias, q) and self._gate_verified(q, k, v, c_q):
            y = flex.flex_gated_attention(q, k, v, c_q)
            if y is not None:  # None: compiling failed, SDPA below
                return y, None
        if whole and self.kernels.causal == "matmul" and matmul_attention.applies(q):
            bias = c_q[..., :, None] - c_k[..., None, :]  # (B, H, L, L): within its bound
            return matmul_attention.causal_attention(q, k, v, bias=bias), None
        return gated_attention(q, k, v, c_q, c_k, q_pos, k_pos, need_weights)

    @staticmethod
    def _gate_verified(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: torch.Tensor) -> bool:
        """Without gradients: True. With them: the first call on a device compares the kernel's
        gradients with SDPA's on this batch (``flex.verify_once``); traced code never checks."""
        if not torch.is_grad_enabled():
            return True
        if torch.compiler.is_compiling():
            return ("gate", q.device.type) in flex._verified
        return flex.verify_once("gate", q.device, q.dtype, lambda: gate_gradient_gap(q, k, v, c))


def gate_gradient_gap(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: torch.Tensor) -> float:
    """max |Δ| of the gradients of q, k, v and c, FlexAttention's gate kernel against SDPA with
    the bias, over the largest gradient (on detached copies: the model's graph is untouched)."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v, c)]
    got = flex.flex_gated_attention(*leaves)
    if got is None:
        raise RuntimeError(flex._broken.get("gate", "compiling failed"))
    positions = torch.arange(q.shape[2], device=q.device)
    want, _ = gated_attention(*leaves, leaves[3], positions, positions)
    # The cotangent is the reference output itself: every output counts, and no random numbers
    # are drawn (a resumed run must draw what the uninterrupted one drew).
    cotangent = want.detach().float()
    grads_got = torch.autograd.grad((got.float() * cotangent).sum(), leaves)
    grads_want = torch.autograd.grad((want.float() * cotangent).sum(), leaves)
    return max(
        float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))
        for a, b in zip(grads_got, grads_want, strict=True)
    )


@register_pe("fox")
class ForgettingTransformer(PositionalEncoding):
    """A forget gate per head and layer (``layer(i)``); no other position information."""

    kind = "attention"
    logit_term = LogitTerm.OWN
    label, order, family = "FoX", 80, "forget gate"
    flex_kind = "gate"  # its forget gate has a FlexAttention kernel of its own

    @classmethod
    def uses_causal_kernel(cls, params: dict[str, Any]) -> bool:
        """True: its attention adds the gate as a bias on the model's causal kernel."""
        return True

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.gate`` one of the variants, time scales positive and ordered."""
        choose("pe.gate", params.get("gate", "data"), GATES)
        t_min = checks.number("pe.time_scale_min", params.get("time_scale_min", 1.0), "> 0")
        t_max = params.get("time_scale_max")
        if t_max is not None and checks.number("pe.time_scale_max", t_max, "> 0") < t_min:
            raise PosexpError(
                f"pe.time_scale_max={t_max} is below pe.time_scale_min={t_min}; "
                "allowed: time_scale_max >= time_scale_min, or null (the training length)"
            )

    def __init__(
        self,
        ctx: PEContext,
        gate: str = "data",
        time_scale_min: float = 1.0,
        time_scale_max: float | None = None,
    ) -> None:
        super().__init__(ctx)
        self.check_params(
            {"gate": gate, "time_scale_min": time_scale_min, "time_scale_max": time_scale_max},
            ctx.train_length,
        )
        bias = time_scale_bias(
            ctx.n_heads, float(time_scale_min), float(time_scale_max or ctx.train_length)
        )
        self.layers = nn.ModuleList(
            FoXLayer(ctx, ForgetGate(ctx.d_model, ctx.n_heads, gate, bias))
            for _ in range(ctx.n_layers)
        )

    def layer(self, index: int) -> PositionalEncoding:
        """Layer ``index``'s gate and attention."""
        return self.layers[index]
