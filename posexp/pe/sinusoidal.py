"""Sinusoidal encoding of Vaswani et al. (2017), added to the token embeddings."""

from __future__ import annotations

from typing import Any

import torch

from posexp import checks
from posexp.pe.base import PEContext, PositionalEncoding, position_divisor, register_pe


def sinusoidal_table(positions: torch.Tensor, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...), for any real positions."""
    i = torch.arange(0, d_model, 2, dtype=torch.float64, device=positions.device)
    angles = positions.to(torch.float64)[..., None] / base ** (i / d_model)
    table = torch.empty(*angles.shape[:-1], d_model, dtype=torch.float64, device=positions.device)
    table[..., 0::2] = torch.sin(angles)
    # An odd d_model has one fewer cosine column than sine columns.
    table[..., 1::2] = torch.cos(angles[..., : d_model // 2])
    return table.float()


@register_pe("sinusoidal")
class SinusoidalEncoding(PositionalEncoding):
    """Fixed sin/cos table added to the embeddings; position interpolation divides positions by s."""

    kind = "embedding"
    label, order, family = "sinusoidal (APE)", 10, "absolute"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.base`` > 1: the wavelengths must grow with the dimension (a base <= 0 gives NaNs)."""
        if "base" in params:
            checks.number("pe.base", params["base"], "> 1")

    def __init__(self, ctx: PEContext, base: float = 10000.0) -> None:
        super().__init__(ctx)
        self.base = base
        self.position_scale = 1.0 / position_divisor(ctx.extension)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Add the sinusoidal table at (possibly interpolated) positions."""
        scaled = positions.to(torch.float64) * self.position_scale
        return x + sinusoidal_table(scaled, self.ctx.d_model, self.base).to(x.dtype)
