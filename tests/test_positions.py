"""Randomized positions: sorted, distinct, in range, deterministic per (seed, step)."""

from __future__ import annotations

import pytest
import torch

from posexp.errors import PosexpError
from posexp.positions import random_positions
from tests.helpers import run_config


def test_positions_are_sorted_distinct_and_in_range():
    p = random_positions(16, 40, 100, seed=3, step=7)
    assert p.shape == (16, 40) and p.dtype == torch.int64
    assert (p[:, 1:] > p[:, :-1]).all()  # strictly increasing: sorted and distinct
    assert p.min() >= 0 and p.max() < 100
    assert not torch.equal(p[0], p[1])  # rows differ


def test_positions_are_a_pure_function_of_seed_and_step():
    assert torch.equal(random_positions(4, 10, 50, 0, 5), random_positions(4, 10, 50, 0, 5))
    assert not torch.equal(random_positions(4, 10, 50, 0, 5), random_positions(4, 10, 50, 0, 6))
    assert not torch.equal(random_positions(4, 10, 50, 0, 5), random_positions(4, 10, 50, 1, 5))


def test_positions_cover_the_whole_range_over_steps():
    seen = torch.cat([random_positions(8, 10, 64, 0, s).flatten() for s in range(50)])
    assert set(seen.tolist()) == set(range(64))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["pe=none", "+pe.randomized=true", "+pe.max_position=100"], "pe=none has none"),
        (["pe.randomized=true"], "pe.randomized=true needs pe.max_position"),
        (["pe.max_position=500"], "pe.max_position only applies with pe.randomized=true"),
        (
            ["pe.randomized=true", "pe.max_position=100"],
            "pe.max_position=100 is below the 256-token",
        ),
        (
            ["pe=learned", "pe.randomized=true", "pe.max_position=1000"],
            "past what pe=learned can represent",
        ),
    ],
)
def test_bad_randomized_settings(overrides, message):
    with pytest.raises(PosexpError, match=message):
        run_config(*overrides)


def test_the_setting_reaches_the_run_config_and_back():
    cfg = run_config("data=copy", "pe=alibi", "pe.randomized=true", "pe.max_position=200")
    assert cfg.positions.randomized and cfg.positions.max_position == 200
    assert "randomized" not in cfg.pe.params  # not handed to the PE's constructor
    assert cfg.to_dict()["pe"]["max_position"] == 200
