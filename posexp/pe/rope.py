"""Rotary position embedding (Su et al. 2021) with the RoPE context-extension methods.

Queries and keys of every head are rotated pair by pair by angle ``m * inv_freq_i``; values are
left alone. Pairs use the "rotate-half" layout (dim i with dim i + head_dim/2), which is the
interleaved layout of the original paper up to a fixed permutation of dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from posexp import checks
from posexp.extension import RopeSpec
from posexp.pe.base import PEContext, PositionalEncoding, register_pe

# The packed tables of a forward are laid out over (T, 2, heads, d) when that is at most this
# many elements, so an elementwise pass runs over whole rows of 2·d_model values; past it (long
# evaluations of wide models) they broadcast from (T, 1, 1, d) instead of taking the memory.
PACKED_TABLE_ELEMENTS = 2**22


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+d/2}) by the angles whose cos/sin are given (..., T, d/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _turn(
    x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, sign: float
) -> torch.Tensor:
    """x·cos + sign·swap(x)·signed_sin, with full-width tables cos = [c, c], signed_sin = [-s, s]
    and swap exchanging the two halves of the last dim: the rotation by +angle (sign 1) or by
    -angle (sign -1), in three passes over x."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.addcmul(x * cos, torch.cat((x2, x1), dim=-1), signed_sin, value=sign)


class _Rotation(torch.autograd.Function):
    """The rotate-half rotation whose gradient is the rotation by the opposite angle, so autograd
    keeps only the tables (no activations) and runs three passes each way instead of seven."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor):
        ctx.save_for_backward(cos, signed_sin)
        return _turn(x, cos, signed_sin, 1.0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        cos, signed_sin = ctx.saved_tensors
        return _turn(grad, cos, signed_sin, -1.0), None, None


def rotate_packed(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` by full-width tables (``_turn``'s layout) broadcastable to it; differentiable."""
    return _Rotation.apply(x, cos, signed_sin)


@dataclass
class RotaryTables:
    """One forward's cos and sin tables (length, d/2), fp32, scaled by the attention factor, and
    the packed q/k tables built from them once per compute dtype and shape (``packed``)."""

    cos: torch.Tensor
    sin: torch.Tensor
    packed: dict[tuple[Any, ...], tuple[torch.Tensor, ...]] = field(default_factory=dict)

    def for_qk(
        self, positions: torch.Tensor, heads: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-width tables for q and k packed as (B, T, 2, heads, d) at ``positions`` (T,), in
        ``dtype``: built on the first layer's call of a forward, reused by the others."""
        key = (id(positions), heads, dtype)
        if key not in self.packed:
            c, s = self.cos[positions], self.sin[positions]
            cos, sin = torch.cat((c, c), dim=-1), torch.cat((-s, s), dim=-1)
            cos, sin = cos[:, None, None].to(dtype), sin[:, None, None].to(dtype)
            shape = (len(positions), 2, heads, cos.shape[-1])
            if cos.shape[0] * 2 * heads * cos.shape[-1] <= PACKED_TABLE_ELEMENTS:
                cos, sin = cos.expand(shape).contiguous(), sin.expand(shape).contiguous()
            # The positions stay referenced, so their id cannot be reused within the forward.
            self.packed[key] = (cos, sin, positions)
        return self.packed[key][:2]


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

    def check_built(self) -> None:
        """Compute the frequencies within and past L0 once, so that an extension's settings the
        rotated dims cannot take (LongRoPE's per-pair lists) fail at build, not mid-run."""
        for seq_len in (self.extension.original_length, self.extension.original_length + 1):
            self.frequencies(seq_len)

    def prepare(self, length: int, device: torch.device) -> RotaryTables:
        """The cos/sin tables for positions 0..length-1, built (or sliced) once per forward."""
        return RotaryTables(*self.cos_sin(length, device))

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
        cos, sin = state.cos, state.sin
        return (
            rotate_half(q, *self._at(cos, sin, q_pos, q.dtype)),
            rotate_half(k, *self._at(cos, sin, k_pos, k.dtype)),
        )

    def rotate_qk(
        self, qk: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys packed as (B, T, 2, H, d), both at ``positions`` (T,), rotated in one
        pass each way; returns (B, H, T, d) views of the result."""
        if state is None:
            raise ValueError("rope.rotate_qk needs the cos/sin tables returned by prepare()")
        cos, sin = state.for_qk(positions, qk.shape[3], qk.dtype)
        rotated = rotate_packed(qk, cos, sin)
        q, k = rotated.unbind(2)
        return q.transpose(1, 2), k.transpose(1, 2)

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
