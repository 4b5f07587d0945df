"""Rotary position embedding (Su et al. 2021) with the RoPE context-extension methods.

Queries and keys of every head are rotated pair by pair by angle ``m * inv_freq_i``; values are
left alone. Pairs use the "rotate-half" layout (dim i with dim i + head_dim/2), which is the
interleaved layout of the original paper up to a fixed permutation of dimensions.
"""

from __future__ import annotations

from typing import Any

import torch

from posexp import checks
from posexp.extension import RopeSpec
from posexp.pe.base import PEContext, PositionalEncoding, register_pe


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+d/2}) by the angles whose cos/sin are given (..., T, d/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


@register_pe("rope")
class RotaryEncoding(PositionalEncoding):
    """Rotates q and k per head; frequencies come from the configured extension method."""

    kind = "rotation"
    label, order, family = "RoPE", 30, "rotary"
    needs_even_head_dim = True  # dimensions rotate in pairs

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.base`` > 1, checked with the config (before any data or model work)."""
        if "base" in params:
            # ln(base) is a denominator in YaRN and θ_i must decrease with i.
            checks.number("pe.base", params["base"], "> 1")

    def __init__(self, ctx: PEContext, base: float = 10000.0) -> None:
        super().__init__(ctx)
        # Checked where the config was built (PEContext filled in original_length).
        self.extension = ctx.extension
        self.method = ctx.extension.registered
        # ln(base) is a denominator in YaRN and θ_i must decrease with i.
        self.base = checks.number("pe.base", base, "> 1")
        self.rotates_cached_keys = self.method.dynamic
        # A memo of the largest table built so far (static methods), sliced for each forward.
        self._cache: tuple[int, torch.device, torch.Tensor, torch.Tensor] | None = None

    def prepare(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The cos/sin tables for positions 0..length-1, built (or sliced) once per forward."""
        return self.cos_sin(length, device)

    def frequencies(self, seq_len: int) -> tuple[torch.Tensor, float]:
        """Inverse frequencies and attention factor for a sequence of ``seq_len`` positions."""
        ext = self.extension
        spec = RopeSpec(self.ctx.head_dim, self.base, ext.factor, ext.original_length, seq_len)
        return self.method(spec, ext.params)

    def cos_sin(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables (length, head_dim/2), scaled by the attention factor."""
        if self.rotates_cached_keys:
            # Dynamic NTK: the frequencies depend on the current length, so no table is reused.
            return self._table(length, length, device)
        if self._cache is None or self._cache[0] < length or self._cache[1] != device:
            # Static methods: grow one table (power-of-two sizes) and slice it.
            size = max(length, 2 * self._cache[0] if self._cache else 0, 64)
            self._cache = (size, device, *self._table(size, self.extension.original_length, device))
        return self._cache[2][:length], self._cache[3][:length]

    def _table(self, length: int, seq_len: int, device: torch.device):
        inv_freq, attention_factor = self.frequencies(seq_len)
        angles = torch.outer(torch.arange(length, dtype=torch.float64), inv_freq.double())
        return (
            (angles.cos() * attention_factor).float().to(device),
            (angles.sin() * attention_factor).float().to(device),
        )

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries at ``q_pos`` and keys at ``k_pos`` by the tables ``prepare`` returned."""
        if state is None:
            raise ValueError("rope.rotate needs the cos/sin tables returned by prepare()")
        cos, sin = state
        return (
            rotate_half(q, *self._at(cos, sin, q_pos, q.dtype)),
            rotate_half(k, *self._at(cos, sin, k_pos, k.dtype)),
        )

    def rotate_at(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` at float positions (T,) or (B, T) with the training-length frequencies."""
        inv_freq, attention_factor = self.frequencies(self.extension.original_length)
        angles = positions.double()[..., None] * inv_freq.double().to(positions.device)
        cos = (angles.cos() * attention_factor).to(x.dtype)
        sin = (angles.sin() * attention_factor).to(x.dtype)
        if positions.dim() == 2:
            cos, sin = cos[:, None], sin[:, None]
        return rotate_half(x, cos, sin)

    @staticmethod
    def _at(cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor, dtype: torch.dtype):
        # Positions (T,) broadcast over (B, H); per-row positions (B, T) need a head axis.
        c, s = cos[pos].to(dtype), sin[pos].to(dtype)
        if pos.dim() == 2:
            c, s = c[:, None], s[:, None]
        return c, s
