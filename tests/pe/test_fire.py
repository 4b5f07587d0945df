"""FIRE: the bias against its closed form with a hand-set MLP."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.pe import PEContext, build_pe


def test_fire_bias_matches_the_formula():
    # hidden = 1, f(u) = relu(u) * slope_h: the bias is slope_h * log(c d + 1) / log(c max(L, i) + 1).
    pe = build_pe("fire", PEContext(d_model=8, n_heads=2, head_dim=4, train_length=4), hidden=1,
                  init_c=0.5)
    slopes = [2.0, -3.0]
    with torch.no_grad():
        pe.mlp[0].weight.fill_(1.0)
        pe.mlp[0].bias.zero_()
        pe.mlp[2].weight.copy_(torch.tensor([[slopes[0]], [slopes[1]]]))
        pe.mlp[2].bias.zero_()
    pos = torch.arange(7)
    bias = pe.bias(pos, pos, torch.float64)
    for h in range(2):
        for i in range(7):
            for j in range(i + 1):
                want = slopes[h] * math.log(0.5 * (i - j) + 1) / math.log(0.5 * max(4, i) + 1)
                assert bias[h, i, j].item() == pytest.approx(want, abs=1e-6)


def test_fire_learns_c_and_the_threshold():
    pe = build_pe("fire", PEContext(d_model=8, n_heads=2, head_dim=4, train_length=4))
    pos = torch.arange(12)  # queries past L = 4, where the threshold matters
    pe.bias(pos, pos, torch.float32).pow(2).sum().backward()
    assert pe.log_c.grad is not None and pe.log_c.grad != 0
    assert pe.threshold.grad is not None and pe.threshold.grad != 0


@pytest.mark.parametrize(("params", "message"), [
    ({"hidden": 0}, "pe.hidden must be a positive integer, got 0"),
    ({"init_c": -1}, "pe.init_c must be a number > 0, got -1"),
])
def test_bad_fire_settings(params, message):
    with pytest.raises(PosexpError, match=message):
        build_pe("fire", PEContext(d_model=8, n_heads=2, head_dim=4, train_length=4), **params)
