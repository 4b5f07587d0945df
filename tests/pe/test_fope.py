"""FoPE (posexp/pe/fope.py): RoPE as its special case, and its tables at worked numbers."""

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.pe import PEContext, build_pe

D, H = 8, 2


def fope(train_length=64, **params):
    return build_pe("fope", PEContext(D * H, H, D, train_length), **params)


def test_without_floor_noise_or_dropped_pairs_it_is_rope():
    rope = build_pe("rope", PEContext(D * H, H, D, 64))
    pe = fope(sigma=0.0, floor=False, ignore_zero=False)
    q, k = torch.randn(2, H, 10, D), torch.randn(2, H, 10, D)
    pos = torch.arange(10)
    want = rope.rotate(q, k, pos, pos, rope.prepare(10, q.device))
    got = pe.rotate(q, k, pos, pos)
    assert torch.allclose(got[0], want[0], atol=1e-5) and torch.allclose(got[1], want[1], atol=1e-5)


def test_worked_tables_d8_l64():
    # θ = 10000^(-2m/8) = [1, 0.1, 0.01, 0.001]; 2π/64 = 0.098: 0.01 and 0.001 floored to 0,
    # D = 2 nonzero, d_out = min(2, 8/4) = 2, stride 1, σ = 0: identity coefficients.
    pe = fope(sigma=0.0)
    assert pe.omega.tolist() == pytest.approx([1.0, 0.1])
    cos, sin = pe.tables(torch.tensor([3]))
    assert cos[0, 0].tolist() == pytest.approx([math.cos(3), math.cos(0.3), 1, 1], abs=1e-6)
    assert sin[1, 0].tolist() == pytest.approx([math.sin(3), math.sin(0.3), 1, 1], abs=1e-6)
    # A position-free pair maps (x1, x2) -> (x1 - x2, x1 + x2): here pair 2 = dims (2, 6).
    x = torch.arange(1.0, 9.0).view(1, 1, 1, D).expand(1, H, 1, D)
    y, _ = pe.rotate(x, x, torch.tensor([3]), torch.tensor([3]))
    assert y[0, 0, 0, 2].item() == pytest.approx(3 - 7) and y[0, 0, 0, 6].item() == pytest.approx(
        3 + 7
    )
    a = y[0, 0, 0, 0].item()
    assert a == pytest.approx(1 * math.cos(3) - 5 * math.sin(3), abs=1e-5)


def test_noise_mixes_frequencies_per_head_and_stays_fixed():
    torch.manual_seed(0)
    pe = fope(sigma=0.3)
    assert not torch.equal(pe.c_cos[0], pe.c_cos[1])
    assert "c_cos" in dict(pe.named_buffers()) and not list(pe.parameters())
    assert len(list(fope(learnable=True).parameters())) == 2


def test_bad_settings_are_one_line():
    with pytest.raises(PosexpError, match="pe.sigma"):
        fope(sigma=-1)
