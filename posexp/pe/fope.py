"""FoPE, Fourier position embedding (Hua et al. 2025, "Fourier Position Embedding: Enhancing
Attention's Periodic Extension for Length Generalization").

RoPE's frequencies ω_m = base^(-2m/d) with two changes per head:

* the floor: a frequency below 2π/L0 cannot finish one period in training, so it is set to 0 and
  its pair carries no position (``floor``);
* the Fourier series: each of the first d_out = min(D, d/4) pairs (D: the nonzero frequencies)
  turns by a mix of all of them, cos_k(t) = Σ_m cos(ω_m t)·C_cos[h, m, k] and sin_k(t) likewise
  with C_sin; the remaining pairs get cos = sin = 1, a fixed position-free map.

C starts as xavier-normal noise of gain ``sigma`` plus a strided identity (slot k takes frequency
k·⌈D/d_out⌉), and stays fixed unless ``learnable`` (the released configs: fixed, σ 0.3-0.6).
With ``ignore_zero=false`` (d_out = d/2, every frequency kept), no floor and σ = 0 it is RoPE.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from posexp import checks
from posexp.pe.base import PEContext, PositionalEncoding, register_pe
from posexp.pe.rope import rotate_half


def fope_frequencies(head_dim: int, base: float, train_length: int, floor: bool) -> torch.Tensor:
    """RoPE's ω_m (float64), those below 2π/L0 set to 0 when ``floor``."""
    omega = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if floor:
        omega = torch.where(omega < 2 * math.pi / train_length, 0.0, omega)
    return omega


@register_pe("fope")
class FourierEncoding(PositionalEncoding):
    """RoPE whose pairs turn by per-head Fourier series of the kept frequencies (see the module)."""

    kind = "rotation"
    # Per-head tables of its own: the frequency methods and remapped rotations do not apply.
    accepts = frozenset({"logits"})
    needs_even_head_dim = True
    label, order, family = "FoPE", 37, "rotary"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.base`` > 1, ``pe.sigma`` >= 0, the flags."""
        if "base" in params:
            checks.number("pe.base", params["base"], "> 1")
        if "sigma" in params:
            checks.number("pe.sigma", params["sigma"], ">= 0")
        for key in ("floor", "ignore_zero", "learnable"):
            if key in params:
                checks.boolean(f"pe.{key}", params[key])

    def __init__(
        self,
        ctx: PEContext,
        base: float = 10000.0,
        sigma: float = 0.3,
        floor: bool = True,
        ignore_zero: bool = True,
        learnable: bool = False,
    ) -> None:
        super().__init__(ctx)
        self.check_params(
            dict(base=base, sigma=sigma, floor=floor, ignore_zero=ignore_zero, learnable=learnable),
            ctx.train_length,
        )
        half = ctx.head_dim // 2
        omega = fope_frequencies(ctx.head_dim, base, ctx.train_length, floor)
        kept = omega[omega > 0] if ignore_zero else omega
        n_freq = len(kept)
        self.d_out = min(n_freq, ctx.head_dim // 4) if ignore_zero else half
        self.register_buffer("omega", kept.float())
        coeff = []
        for _ in range(2):  # C_cos, C_sin
            c = torch.zeros(ctx.n_heads, n_freq, self.d_out)
            if sigma > 0 and n_freq and self.d_out:
                for h in range(ctx.n_heads):
                    nn.init.xavier_normal_(c[h], gain=sigma)
            if n_freq and self.d_out:
                stride = math.ceil(n_freq / self.d_out)
                for k in range(self.d_out):
                    c[:, min(k * stride, n_freq - 1), k] += 1.0
            coeff.append(c)
        if learnable:
            self.c_cos, self.c_sin = nn.Parameter(coeff[0]), nn.Parameter(coeff[1])
        else:
            self.register_buffer("c_cos", coeff[0])
            self.register_buffer("c_sin", coeff[1])
        self.half = half

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables (H, T, d/2) at positions (T,), fp32."""
        angles = positions.float()[:, None] * self.omega.to(positions.device)  # (T, D)
        cos = torch.einsum("tm,hmk->htk", angles.cos(), self.c_cos)
        sin = torch.einsum("tm,hmk->htk", angles.sin(), self.c_sin)
        pad = self.half - self.d_out
        if pad:
            ones = cos.new_ones(*cos.shape[:2], pad)
            cos, sin = torch.cat((cos, ones), -1), torch.cat((sin, ones), -1)
        return cos, sin

    def _turn(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if positions.dim() == 2:  # per-row positions: one table per row
            tabs = [self.tables(p) for p in positions]
            cos = torch.stack([c for c, _ in tabs]).to(x.dtype)
            sin = torch.stack([s for _, s in tabs]).to(x.dtype)
        else:
            cos, sin = (t.to(x.dtype) for t in self.tables(positions))
        return rotate_half(x, cos, sin)

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        state: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries at ``q_pos`` and keys at ``k_pos`` turned by the per-head tables."""
        return self._turn(q, q_pos), self._turn(k, k_pos)

    def rotate_qk(
        self, qk: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys packed as (B, T, 2, H, d) at ``positions``; (B, H, T, d) each."""
        q, k = (t.transpose(1, 2) for t in qk.unbind(2))
        return self.rotate(q, k, positions, positions, state)
