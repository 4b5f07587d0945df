"""Kerple: the log and power kernels against values worked out by hand, flex and SDPA alike."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.pe import PEContext, build_pe, get_pe


def kerple(variant, heads=2):
    return build_pe(
        "kerple",
        PEContext(d_model=8 * heads, n_heads=heads, head_dim=8, train_length=16),
        variant=variant,
    )


def test_log_kernel_by_hand():
    pe = kerple("log")
    with torch.no_grad():
        pe.r1.copy_(torch.tensor([2.0, 0.5]))
        pe.r2.copy_(torch.tensor([1.0, 3.0]))
    pos = torch.arange(4)
    bias = pe.bias(pos, pos, torch.float32)
    # head 0, query 3, key 0: -2 log(1 + 1*3) = -2 ln 4; head 1, query 2, key 1: -0.5 ln(1 + 3)
    assert bias[0, 3, 0].item() == pytest.approx(-2 * math.log(4))
    assert bias[1, 2, 1].item() == pytest.approx(-0.5 * math.log(4))
    assert torch.all(bias[:, range(4), range(4)] == 0)  # distance 0 costs nothing
    assert torch.equal(bias[:, 0, 3], bias[:, 3, 0])  # |i - j|: symmetric, so no NaN above


def test_power_kernel_by_hand_and_r2_capped_at_two():
    pe = kerple("power")
    with torch.no_grad():
        pe.r1.copy_(torch.tensor([1.0, 0.25]))
        pe.r2.copy_(torch.tensor([0.5, 5.0]))  # 5 is clamped to 2 where used
    pos = torch.arange(5)
    bias = pe.bias(pos, pos, torch.float32)
    assert bias[0, 4, 0].item() == pytest.approx(-(4**0.5))
    assert bias[1, 3, 0].item() == pytest.approx(-0.25 * 3**2)


def test_starting_coefficients_spread_over_heads():
    pe = kerple("log", heads=4)
    assert torch.equal(pe.r1, torch.ones(4))
    assert torch.allclose(pe.r2, torch.tensor([1.0, 2 ** (-1 / 3), 2 ** (-2 / 3), 0.5]))
    assert torch.allclose(kerple("power", heads=2).r2, torch.tensor([2.0, 0.5]))


@pytest.mark.parametrize("variant", ["log", "power"])
def test_score_mod_equals_the_bias(variant):
    pe = kerple(variant)
    q_idx, kv_idx = torch.tensor(7), torch.tensor(2)
    got = pe.score_mod()(torch.tensor(0.0), 0, torch.tensor(1), q_idx, kv_idx)
    assert got.item() == pytest.approx(
        pe.bias(torch.arange(8), torch.arange(8), torch.float32)[1, 7, 2].item()
    )


def test_unknown_variant_is_one_line():
    with pytest.raises(PosexpError, match="pe.variant must be one of log, power, got 'cubic'"):
        get_pe("kerple").check_params({"variant": "cubic"}, 64)
