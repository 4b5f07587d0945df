"""GPT-NeoX's partial rotary embedding (Black et al. 2022, "GPT-NeoX-20B"): RoPE on the first
``r = int(rotary_pct · d)`` dims of each head, the other ``d − r`` dims passed through.

Inside the rotated dims the pairs are ``(i, i + r/2)`` (rotate-half) and the frequencies are
``θ_i = base^(−2i/r)``: RoPE's whole frequency range, from 1 down to about 1/base, squeezed into
``r`` dims. This is not p-RoPE (``posexp/pe/p_rope.py``), which keeps RoPE's pairs and
frequencies for the full head and leaves its slowest pairs unrotated: at the same fraction the
two rotate other dims, at other frequencies. An extension method computes its frequencies for the
``r`` rotated dims (its RopeSpec's head dim is ``r``, as Hugging Face's ``partial_rotary_factor``
does), and its attention factor scales those dims only.
"""

from __future__ import annotations

from typing import Any

import torch

from posexp import checks
from posexp.errors import PosexpError
from posexp.extension import RopeSpec
from posexp.pe.base import PEContext, register_pe
from posexp.pe.rope import RotaryEncoding, RotaryTables, rotate_packed


@register_pe("neox_rope")
class NeoXRotary(RotaryEncoding):
    """RoPE on the first ``int(rotary_pct · head_dim)`` dims, with frequencies base^(−2i/r)."""

    label, order, family = "NeoX partial RoPE", 31, "rotary"
    needs_even_head_dim = False  # only the r rotated dims pair up (checked at build)

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.base`` > 1 and ``pe.rotary_pct`` in (0, 1], checked with the config."""
        super().check_params(params, seq_len)
        if "rotary_pct" in params:
            checks.number("pe.rotary_pct", params["rotary_pct"], "in (0, 1]")

    def __init__(self, ctx: PEContext, base: float = 10000.0, rotary_pct: float = 0.25) -> None:
        super().__init__(ctx, base)
        self.rotary_pct = checks.number("pe.rotary_pct", rotary_pct, "in (0, 1]")
        # Truncated as GPT-NeoX and Hugging Face do, so the same setting rotates the same dims.
        self.rotary_dim = int(ctx.head_dim * self.rotary_pct)
        if self.rotary_dim < 2 or self.rotary_dim % 2:
            raise PosexpError(
                f"pe.rotary_pct={self.rotary_pct:g} rotates int({self.rotary_pct:g} x "
                f"{ctx.head_dim}) = {self.rotary_dim} dims of each head; they pair up, so it must "
                f"be an even number >= 2: change pe.rotary_pct or the head dim"
            )

    def frequencies(self, seq_len: int) -> tuple[torch.Tensor, float]:
        """Inverse frequencies (r/2 of them) and attention factor for the rotated dims."""
        ext = self.extension
        spec = RopeSpec(self.rotary_dim, self.base, ext.factor, ext.original_length, seq_len)
        return self.method(spec, ext.params)

    def _cat(self, rotated: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # The dims past r are passed through as they are.
        return torch.cat((rotated, x[..., self.rotary_dim :]), dim=-1)

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        state: RotaryTables | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE's rotation of the first r dims of queries and keys (B, H, T, d)."""
        r = self.rotary_dim
        q_rot, k_rot = super().rotate(q[..., :r], k[..., :r], q_pos, k_pos, state)
        return self._cat(q_rot, q), self._cat(k_rot, k)

    def rotate_qk(
        self, qk: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys packed as (B, T, 2, H, d): the first r dims of both rotated in one
        pass, the rest copied; returns (B, H, T, d) views."""
        if state is None:
            raise ValueError("neox_rope.rotate_qk needs the cos/sin tables returned by prepare()")
        cos, sin = state.for_qk(positions, qk.shape[3], qk.dtype)
        # split (not slicing) so the backward is one concatenation, not zero-filled copies.
        head, tail = qk.split((self.rotary_dim, qk.shape[-1] - self.rotary_dim), dim=-1)
        rotated = torch.cat((rotate_packed(head, cos, sin), tail), dim=-1)
        q, k = rotated.unbind(2)
        return q.transpose(1, 2), k.transpose(1, 2)

    def rotate_at(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate the first r dims of ``x`` (B, H, T, d) at float positions (T,) or (B, T)."""
        return self._cat(super().rotate_at(x[..., : self.rotary_dim], positions), x)
