"""PoPE, polar coordinate position embeddings (Gopalakrishnan et al. 2025, "Decoupling the 'What'
and 'Where' With Polar Coordinate Positional Embeddings").

Each of a head's d components c of a query or key becomes one complex number: its magnitude
μ = softplus(x_c) carries content only, its phase t·θ_c position only, θ_c = base^(-c/d) (d
frequencies, one per component, not RoPE's d/2 pairs). Written in real form q̃, k̃ have 2d
entries [μ cos φ, μ sin φ], so the score is

    q̃_t · k̃_s = Σ_c μ^q_{t,c} μ^k_{s,c} cos((t - s)·θ_c - δ_c),

a function of the relative position and the magnitudes alone; δ (heads × d) is a learned phase
offset added to the keys' phases, zero at first and kept in [-2π, 0]. Values keep d entries;
attention scales the scores by 1/√(2d) (the width of q̃; the paper's choice is not confirmed).
One δ serves every layer.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posexp import checks
from posexp.pe.base import PEContext, PositionalEncoding, register_pe


def pope_frequencies(head_dim: int, base: float) -> torch.Tensor:
    """θ_c = base^(-c/d), c = 0..d-1 (float64)."""
    return base ** (-torch.arange(head_dim, dtype=torch.float64) / head_dim)


@register_pe("pope")
class PolarEncoding(PositionalEncoding):
    """Queries and keys as softplus magnitudes at RoPE-like phases (2d-wide, see the module)."""

    kind = "rotation"
    # Its own widening map: the extension methods' frequencies and remapped rotations do not
    # apply, log-length scaling and blockwise attention do.
    accepts = frozenset({"logits"})
    label, order, family = "PoPE", 36, "rotary"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.base`` > 1."""
        if "base" in params:
            checks.number("pe.base", params["base"], "> 1")

    def __init__(self, ctx: PEContext, base: float = 10000.0) -> None:
        super().__init__(ctx)
        self.base = checks.number("pe.base", base, "> 1")
        self.register_buffer("theta", pope_frequencies(ctx.head_dim, self.base).float())
        self.delta = nn.Parameter(torch.zeros(ctx.n_heads, ctx.head_dim))

    def prepare(self, length: int, device: torch.device) -> torch.Tensor:
        """Phases t·θ_c for t in 0..length-1: (length, d), fp32."""
        return torch.arange(length, device=device, dtype=torch.float32)[:, None] * self.theta

    def polar(self, x: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """[softplus(x) cos φ, softplus(x) sin φ] (..., 2d) for x (B, H, T, d), φ broadcastable."""
        mu = F.softplus(x.float())
        return torch.cat((mu * phase.cos(), mu * phase.sin()), dim=-1).to(x.dtype)

    def _phase(self, positions: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        if state is not None and positions.dim() == 1:
            return state[positions]
        return positions.float()[..., None] * self.theta.to(positions.device)

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        state: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q̃ at ``q_pos`` and k̃ at ``k_pos`` (plus δ), each (B, H, T, 2d)."""
        pq, pk = self._phase(q_pos, state), self._phase(k_pos, state)
        if q_pos.dim() == 2:
            pq, pk = pq[:, None], pk[:, None]
        delta = self.delta.clamp(-2 * math.pi, 0.0)[:, None, :]  # (H, 1, d)
        return self.polar(q, pq), self.polar(k, pk + delta)

    def rotate_qk(
        self, qk: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys packed as (B, T, 2, H, d) at ``positions``; (B, H, T, 2d) each."""
        q, k = (t.transpose(1, 2) for t in qk.unbind(2))
        return self.rotate(q, k, positions, positions, state)
