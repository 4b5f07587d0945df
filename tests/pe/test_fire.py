"""FIRE: the bias against its closed form with a hand-set MLP; its score_mod against the bias."""

from __future__ import annotations

import collections
import inspect
import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

from posexp.errors import PosexpError
from posexp.pe import PEContext, build_pe


def test_fire_bias_matches_the_formula():
    # hidden = 1, f(u) = relu(u) * slope_h: the bias is slope_h * log(c d + 1) / log(c max(L, i) + 1).
    pe = build_pe(
        "fire", PEContext(d_model=8, n_heads=2, head_dim=4, train_length=4), hidden=1, init_c=0.5
    )
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


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"hidden": 0}, "pe.hidden must be a positive integer, got 0"),
        ({"init_c": -1}, "pe.init_c must be a finite number > 0, got -1"),
        ({"hidden": True}, "pe.hidden must be a positive integer, got true"),
    ],
)
def test_bad_fire_settings(params, message):
    with pytest.raises(PosexpError, match=message):
        build_pe("fire", PEContext(d_model=8, n_heads=2, head_dim=4, train_length=4), **params)


def _score_grid(pe, length: int, tables: bool = False) -> torch.Tensor:
    """FIRE's score_mod evaluated eagerly over every (head, query, key) at once (``tables``: the
    score_mod that reads its inputs from tables, built without gradients)."""
    score_mod = pe.score_mod(length if tables else None)
    h = torch.arange(pe.ctx.n_heads)[:, None, None]
    i, j = torch.arange(length)[None, :, None], torch.arange(length)[None, None, :]
    return score_mod(torch.zeros(()), 0, h, i, j)


def _units(score_mod) -> list:
    """The ReLU units a score_mod evaluates per score."""
    mlp = inspect.getclosurevars(score_mod).nonlocals["mlp"]
    return inspect.getclosurevars(mlp).nonlocals["units"]


def test_score_mod_folds_units_that_do_not_bend_in_the_unit_interval():
    # Kinks -b/w: 0.5 (bends inside [0, 1], rising), -0.5 (always on there), -0.2 (always off),
    # a unit with w = 0 (the constant relu(0.3)), and 0.6 (bends, falling: relu(1.2 - 2u) is
    # 2·relu(u - 0.6) plus 2·(0.6 - u)). Only the first and the last need evaluating per score.
    pe = build_pe("fire", PEContext(d_model=8, n_heads=2, head_dim=4, train_length=4), hidden=5)
    with torch.no_grad():
        pe.mlp[0].weight.copy_(torch.tensor([[1.0], [1.0], [-1.0], [0.0], [-2.0]]))
        pe.mlp[0].bias.copy_(torch.tensor([-0.5, 0.5, -0.2, 0.3, 1.2]))
        pe.mlp[2].weight.normal_()
        pe.mlp[2].bias.normal_()
    pos = torch.arange(9)
    with torch.no_grad():
        want = pe.bias(pos, pos, torch.float32)
        assert len(_units(pe.score_mod())) == 2
        assert torch.allclose(_score_grid(pe, 9), want, atol=1e-6)
        assert torch.allclose(_score_grid(pe, 9, tables=True), want, atol=1e-6)
    # With gradients every unit stays, so the gradient reaches every weight.
    assert len(_units(pe.score_mod())) == 5
    grid = _score_grid(pe, 9)
    assert torch.allclose(grid.detach(), want, atol=1e-6)
    grid.sum().backward()
    assert (pe.mlp[0].weight.grad != 0).sum() >= 3 and pe.log_c.grad != 0


def test_folded_score_mod_equals_the_bias_at_initialisation():
    torch.manual_seed(1)
    pe = build_pe("fire", PEContext(d_model=32, n_heads=4, head_dim=8, train_length=16))
    pos = torch.arange(40)  # past the threshold too
    with torch.no_grad():
        assert 0 < len(_units(pe.score_mod())) < 32
        assert torch.allclose(_score_grid(pe, 40), pe.bias(pos, pos, torch.float32), atol=1e-5)


def test_table_score_mod_equals_the_bias_past_the_threshold():
    torch.manual_seed(3)
    pe = build_pe("fire", PEContext(d_model=32, n_heads=4, head_dim=8, train_length=16))
    pos = torch.arange(70)  # queries past L = 16, distances up to 69
    with torch.no_grad():
        pe.log_c.fill_(math.log(0.37))
        pe.threshold.fill_(-21.5)  # used as |L|
        score_mod = pe.score_mod(70)
        assert score_mod.__name__ == "fire_table_score"
        grid = _score_grid(pe, 70, tables=True)
        assert torch.allclose(grid, pe.bias(pos, pos, torch.float32), atol=1e-5)
    # With gradients the logarithms stay, so c and L get theirs.
    assert pe.score_mod(70).__name__ == "fire_score"


def test_fire_tables_cover_the_length_in_powers_of_two():
    from posexp.pe.fire import TABLE_MIN, fire_tables

    c, threshold = torch.tensor(0.5), torch.tensor(8.0)
    assert fire_tables(c, threshold, 10)[0].shape == (TABLE_MIN,)
    assert fire_tables(c, threshold, TABLE_MIN + 1)[1].shape == (2 * TABLE_MIN,)
    log_distance, inverse_norm = fire_tables(c, threshold, 10)
    assert log_distance[6].item() == pytest.approx(math.log(0.5 * 6 + 1))
    assert inverse_norm[3].item() == pytest.approx(1 / math.log(0.5 * 8 + 1))  # below L: L
    assert inverse_norm[20].item() == pytest.approx(1 / math.log(0.5 * 20 + 1))


def test_score_mod_gradients_equal_the_bias_gradients():
    torch.manual_seed(2)
    pe = build_pe("fire", PEContext(d_model=32, n_heads=4, head_dim=8, train_length=16))
    pos, weights = torch.arange(24), torch.randn(4, 24, 24)
    (pe.bias(pos, pos, torch.float32) * weights).sum().backward()
    want = {n: p.grad.clone() for n, p in pe.named_parameters()}
    pe.zero_grad()
    (_score_grid(pe, 24) * weights).sum().backward()
    for name, param in pe.named_parameters():
        assert torch.allclose(param.grad, want[name], rtol=1e-4, atol=1e-5), name


def test_score_mod_indexes_each_trainable_capture_at_most_once():
    # FlexAttention's CUDA backward refuses a score_mod that indexes one tensor needing a
    # gradient more than once (it cannot accumulate that tensor's gradient); count the reads.
    pe = build_pe("fire", PEContext(d_model=32, n_heads=4, head_dim=8, train_length=16))
    reads: collections.Counter[int] = collections.Counter()

    class CountReads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__getitem__ and args[0].requires_grad:
                reads[id(args[0])] += 1
            return func(*args, **(kwargs or {}))

    score_mod = pe.score_mod()
    with CountReads():
        score_mod(torch.zeros(()), 0, torch.tensor(1), torch.tensor(20), torch.tensor(3))
    assert len(reads) == 3 * 32 + 3  # c, threshold, the output bias; three per unit
    assert max(reads.values()) == 1
