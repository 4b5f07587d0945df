"""Sandwich's bias against its closed form, worked by hand for a small d'."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.pe import PEContext, PositionOutOfRange, build_pe
from tests.helpers import run_config


def sandwich(heads: int, dim: int) -> torch.nn.Module:
    return build_pe("sandwich", PEContext(heads * 8, heads, 8, 64), dim=dim)


def test_closed_form_for_a_four_dim_sinusoid():
    # d' = 4: ω_1 = 10000^(-1/2) = 1/100, ω_2 = 10000^(-1) = 1/10000, so for head h of H = 2,
    # b_h(Δ) = (cos(Δ/100) + cos(Δ/10000) - 2) · 2 / (8h).
    pe = sandwich(heads=2, dim=4)
    pos = torch.tensor([0, 1, 100, 1000])
    got = pe.bias(pos, torch.tensor([0]), torch.float64)[:, :, 0]  # distances 0, 1, 100, 1000
    for h in (1, 2):
        for row, d in enumerate([0, 1, 100, 1000]):
            expected = (math.cos(d / 100) + math.cos(d / 10000) - 2) * 2 / (8 * h)
            assert got[h - 1, row].item() == pytest.approx(expected, abs=1e-6)
    # Worked: Δ = 100, h = 1: (cos 1 + cos 0.01 - 2) / 4 = (0.540302 + 0.999950 - 2) / 4.
    assert got[0, 2].item() == pytest.approx(-0.114937, abs=1e-6)


def test_zero_at_distance_zero_never_positive_and_weaker_in_later_heads():
    pe = sandwich(heads=4, dim=128)
    b = pe.bias(torch.arange(300), torch.arange(300), torch.float32)
    assert torch.all(b.diagonal(dim1=-2, dim2=-1) == 0)
    assert b.max() <= 0
    # Compression H / (8h): head h's bias is head 1's divided by h.
    torch.testing.assert_close(b[3] * 4, b[0])
    # Falling over the first distances, as the fast frequencies decorrelate.
    first = b[0, 10, :11].flip(0)  # distances 0 .. 10
    assert torch.all(first[1:] < first[:-1])


def test_per_row_positions_and_the_length_limit():
    pe = sandwich(heads=2, dim=16)
    rows = torch.tensor([[0, 3, 9], [1, 2, 40]])
    b = pe.bias(rows, rows, torch.float32)
    assert b.shape == (2, 2, 3, 3)
    torch.testing.assert_close(b[1, :, 2, 0], pe.table[:, 39])
    with pytest.raises(PositionOutOfRange, match="sandwich holds 65,536 positions, got 65,537"):
        pe.prepare(65537, torch.device("cpu"))


def test_config_checks():
    assert run_config("pe=sandwich", "pe.dim=64").pe.params == {"dim": 64}
    with pytest.raises(PosexpError, match="pe.dim must be a positive even integer, got 63"):
        run_config("pe=sandwich", "pe.dim=63")
