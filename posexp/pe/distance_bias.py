"""A position bias written as tables by distance, the form posexp's CPU attention kernel reads
(``posexp/kernels/cpp_bias.py``): where a PE's bias of query i and key j <= i is

* ``table[h, i - j]`` (ALiBi, T5, Kerple, Sandwich: the distance alone), or
* FIRE's ``intercept[h] + slope[h]·u + Σ_t gains[h, t]·relu(u - kinks[t])`` at
  ``u = table[i - j]·row_scale[i]`` (an MLP of one input is piecewise linear in it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DistanceBias:
    """A bias by distance for queries and keys at 0..L-1 (tables of at least L entries)."""

    table: torch.Tensor  # (H, L) per head, or (L,) shared when ``piecewise`` is given
    row_scale: torch.Tensor | None = None  # (L,): FIRE's 1/ψ(max(threshold, i))
    # (intercept (H,), slope (H,), kinks (U,), gains (H, U)): FIRE's MLP, its units unfolded
    piecewise: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None


def by_distance(bias: torch.Tensor) -> DistanceBias:
    """The DistanceBias of a bias (H, L, 1) evaluated for queries at 0..L-1 and a key at 0."""
    return DistanceBias(bias[:, :, 0].float().contiguous())
