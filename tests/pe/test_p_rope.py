"""p-RoPE: the highest-frequency pairs rotate as in RoPE, the others not at all."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.pe import PEContext, build_pe, get_pe


def ctx(**extension):
    ext = ExtensionConfig.from_dict(extension) if extension else ExtensionConfig()
    return PEContext(d_model=32, n_heads=2, head_dim=16, train_length=32, extension=ext)


def rotated(pe, length=10):
    torch.manual_seed(0)
    q = torch.randn(1, 2, length, 16)
    state = pe.prepare(length, torch.device("cpu"))
    pos = torch.arange(length)
    return q, pe.rotate(q, q, pos, pos, state)[0]


def test_fraction_one_is_rope_and_zero_leaves_q_unrotated():
    q, full = rotated(build_pe("p_rope", ctx(), fraction=1.0))
    _, rope = rotated(build_pe("rope", ctx()))
    assert torch.equal(full, rope)
    q, none = rotated(build_pe("p_rope", ctx(), fraction=0.0))
    assert torch.allclose(none, q)


def test_half_rotates_the_four_fastest_of_eight_pairs_by_hand():
    pe = build_pe("p_rope", ctx(), fraction=0.5)
    q, out = rotated(pe)
    theta = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    m = 7
    for i in range(8):
        a, b = q[0, 0, m, i].double(), q[0, 0, m, i + 8].double()
        angle = m * float(theta[i]) if i < 4 else 0.0
        c, s = math.cos(angle), math.sin(angle)
        assert out[0, 0, m, i].item() == pytest.approx(float(a * c - b * s), abs=1e-5)
        assert out[0, 0, m, i + 8].item() == pytest.approx(float(b * c + a * s), abs=1e-5)


def test_extension_acts_on_the_rotated_pairs_only():
    pe = build_pe("p_rope", ctx(method="pi", factor=2.0), fraction=0.5)
    inv_freq, _ = pe.frequencies(64)
    theta = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    assert torch.allclose(inv_freq[:4].double(), theta[:4] / 2)
    assert torch.all(inv_freq[4:] == 0)


def test_fraction_outside_zero_one_is_one_line():
    with pytest.raises(
        PosexpError, match=r"pe.fraction must be a finite number in \[0, 1\], got 1.5"
    ):
        get_pe("p_rope").check_params({"fraction": 1.5}, 64)
