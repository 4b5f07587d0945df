"""Partial RoPE, "p-RoPE" (Barbero et al. 2024, "Round and Round We Go! What makes Rotary
Positional Encodings useful?"): rotate only the highest frequencies.

The pairs of each head are RoPE's, highest frequency first; the first ``round(fraction · d/2)``
turn by ``m · θ_i`` as in RoPE and the rest are left unrotated (θ = 0), so they carry content
alone. ``fraction = 1`` is RoPE and ``fraction = 0`` is NoPE. An extension method computes its
frequencies for the whole head, as for RoPE, and then the low pairs are set to zero, so it acts
on the rotated part only (its attention factor, if any, scales every pair alike).
"""

from __future__ import annotations

from typing import Any

import torch

from posexp import checks
from posexp.pe.base import PEContext, register_pe
from posexp.pe.rope import RotaryEncoding


@register_pe("p_rope")
class PartialRotary(RotaryEncoding):
    """RoPE on the fraction ``fraction`` of the highest-frequency pairs; the rest unrotated."""

    label, order, family = "p-RoPE", 32, "rotary"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.base`` > 1 and ``pe.fraction`` in [0, 1], checked with the config."""
        super().check_params(params, seq_len)
        if "fraction" in params:
            checks.number("pe.fraction", params["fraction"], "in [0, 1]")

    def __init__(self, ctx: PEContext, base: float = 10000.0, fraction: float = 0.75) -> None:
        super().__init__(ctx, base)
        self.fraction = checks.number("pe.fraction", fraction, "in [0, 1]")
        self.rotated_pairs = round(self.fraction * (ctx.head_dim // 2))

    def frequencies(self, seq_len: int) -> tuple[torch.Tensor, float]:
        """RoPE's frequencies under the extension method, zero past the rotated pairs."""
        inv_freq, attention_factor = super().frequencies(seq_len)
        inv_freq = inv_freq.clone()
        inv_freq[self.rotated_pairs :] = 0.0
        return inv_freq, attention_factor
