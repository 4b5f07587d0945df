"""The cost an evaluation announces (posexp/commands/extrapolate/cost.py), against sums done
by hand for a model of known sizes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from posexp.commands.extrapolate import cost
from posexp.commands.extrapolate.plan import forward_bytes

MODEL = SimpleNamespace(d_model=64, n_layers=2, vocab_size=260, n_heads=4)


def plan(*cells):
    """A plan of cells (length, tokens read) of MODEL."""
    items = [SimpleNamespace(record=SimpleNamespace(length=n), size=t) for n, t in cells]
    return SimpleNamespace(run=SimpleNamespace(), todo=items)


@pytest.fixture(autouse=True)
def model_of_every_run(monkeypatch):
    """Every plan's run is a saved MODEL."""
    monkeypatch.setattr(cost, "saved_model_config", lambda run: MODEL)


def test_the_cost_is_the_sum_of_its_cells():
    # A million tokens in one window, and stride-1 sliding windows: 4 windows of 256 a batch.
    c = cost.cost_of([plan((1_000_000, 1_000_000), (256, 256 * 10))], batch_tokens=1024)
    assert (c.cells, c.tokens, c.longest) == (2, 1_002_560, 1_000_000)
    assert c.forwards == 1 + 3  # ceil(10 windows / 4 a batch)
    weights = 2 * (12 * 2 * 64 * 64 + 260 * 64)  # FLOPs a token through the weights
    expected = 1_000_000 * (weights + 2 * 2 * 64 * 1_000_000) + 2560 * (weights + 2 * 2 * 64 * 256)
    assert c.flops == expected
    assert c.memory == forward_bytes(1_000_000, 1024, MODEL)


def test_a_short_evaluation_says_nothing_and_measures_nothing(monkeypatch):
    said = []
    console = SimpleNamespace(print=lambda *a, **k: said.append(a))
    monkeypatch.setattr("posexp.runtime.budget.matmul_rate", lambda *a: 1 / 0)
    c = cost.say_cost([plan((256, 4096))], 1024, "cpu", console)
    assert c.cells == 1 and said == []
