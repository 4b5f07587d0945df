"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE whose scores decay with
distance.

Queries and keys are rotated as by RoPE, then pair i of a query at position n is multiplied by
ζ_i^(n/B) and of a key at position m by ζ_i^(-m/B), with ζ_i = (2i/d + γ)/(1 + γ) (γ = 0.4, so ζ
runs from 0.29 for the fastest pair to about 1 for the slowest) and B = ``scale_base`` (512).
Their product carries ζ_i^((n - m)/B): the score of a key decays with its distance, fastest in
the high-frequency pairs. Positions are not centred (the authors' code centres them for range);
keys and queries are scaled at their own positions, so the KV cache needs nothing more, and
fp32 or bf16 hold the factors up to about 32,000 positions; longer inputs are refused.
Extension methods act on the rotation as for RoPE; the decay keeps the raw positions.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posexp import checks
from posexp.pe.base import PEContext, PositionalEncoding, PositionOutOfRange, register_pe
from posexp.pe.rope import RotaryEncoding

# exp(±x) stays finite in fp32 and bf16 (same exponent range) for x below about 88.
FINITE_EXPONENT = 80.0


@register_pe("xpos")
class XPos(RotaryEncoding):
    """RoPE times ζ_i^(n/B) on queries and ζ_i^(-m/B) on keys, per rotation pair."""

    label, order, family = "xPos", 33, "rotary"
    # Its decay reads the raw positions, so a remapped relative distance (Self-Extend, ReRoPE)
    # would rotate and decay by two different distances: those methods are not offered.
    accepts = frozenset({"positions", "frequencies", "logits"})

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.gamma`` > 0 and ``pe.scale_base`` > 0, checked with the config."""
        super().check_params(params, seq_len)
        if "gamma" in params:
            checks.number("pe.gamma", params["gamma"], "> 0")
        if "scale_base" in params:
            checks.number("pe.scale_base", params["scale_base"], "> 0")

    def __init__(
        self, ctx: PEContext, base: float = 10000.0, gamma: float = 0.4, scale_base: float = 512
    ) -> None:
        super().__init__(ctx, base)
        self.gamma = checks.number("pe.gamma", gamma, "> 0")
        self.scale_base = checks.number("pe.scale_base", scale_base, "> 0")
        d = ctx.head_dim
        zeta = (torch.arange(0, d, 2, dtype=torch.float64) / d + self.gamma) / (1 + self.gamma)
        self.register_buffer("log_zeta", zeta.log().float(), persistent=False)

    @property
    def max_positions(self) -> int | None:
        """Positions whose decay factors stay finite (about 32,700 at γ = 0.4, B = 512)."""
        fastest = -math.log(self.gamma / (1 + self.gamma))
        return int(FINITE_EXPONENT * self.scale_base / fastest)

    def prepare(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE's tables; refuses lengths whose decay factors would overflow."""
        if length > self.max_positions:
            raise PositionOutOfRange(
                f"xpos holds {self.max_positions:,} positions at pe.gamma={self.gamma:g}, "
                f"pe.scale_base={self.scale_base:g}, got {length:,}; raise pe.scale_base",
                reason=f"xpos holds {self.max_positions:,} positions at pe.gamma={self.gamma:g}, "
                f"pe.scale_base={self.scale_base:g}; raise pe.scale_base",
            )
        return super().prepare(length, device)

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE's rotation, then the decay factors of each position."""
        q, k = super().rotate(q, k, q_pos, k_pos, state)
        return q * self._decay(q_pos, 1.0, q.dtype), k * self._decay(k_pos, -1.0, k.dtype)

    # Its decay differs between queries and keys, so packed q/k go through ``rotate``.
    rotate_qk = PositionalEncoding.rotate_qk

    def _decay(self, pos: torch.Tensor, sign: float, dtype: torch.dtype) -> torch.Tensor:
        # ζ_i^(±p/B) per pair, laid out like the rotate-half pairs (i and i + d/2 share ζ_i).
        half = torch.exp(sign * pos[..., None].float() / self.scale_base * self.log_zeta)
        scale = torch.cat((half, half), dim=-1).to(dtype)
        return scale[:, None] if pos.dim() == 2 else scale  # per-row positions: a head axis
