"""Randomized positions: sorted, distinct, in range, deterministic per (seed, step)."""

from __future__ import annotations

import pytest
import torch

from posexp.errors import PosexpError
from posexp.positions.randomized import random_positions
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


def test_scored_rows_of_a_randomized_run_get_positions_drawn_as_in_training():
    from posexp.positions.randomized import PositionSampling, scoring_positions

    assert scoring_positions(PositionSampling()) is None  # any other run: 0..T-1
    draw = scoring_positions(PositionSampling(True, 64))
    p = draw(8, 20, 0)
    assert p.shape == (8, 20) and (p[:, 1:] > p[:, :-1]).all() and p.max() < 64
    assert torch.equal(draw(8, 20, 0), p)  # every evaluation scores the same draws
    assert not torch.equal(draw(8, 20, 1), p)  # each batch its own
    with pytest.raises(
        PosexpError, match="a scored row of 65 tokens is longer than pe.max_position=64"
    ):
        draw(1, 65, 0)


def test_task_scoring_passes_the_drawn_positions_to_the_model():
    from posexp.objectives.synthetic import score_examples
    from posexp.positions.randomized import PositionSampling, scoring_positions

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seen = []

        def forward(self, x, **kwargs):
            self.seen.append(kwargs.get("positions"))
            return {"logits": torch.zeros(*x.shape, 260)}

    from posexp.data.tokenizers import ByteTokenizer

    tok = ByteTokenizer()
    spy = Spy()
    examples = [("abc", "cba"), ("abcd", "dcba")]
    score_examples(spy, examples, tok, torch.device("cpu"))
    assert spy.seen == [None]
    score_examples(
        spy,
        examples,
        tok,
        torch.device("cpu"),
        positions=scoring_positions(PositionSampling(True, 32)),
    )
    assert spy.seen[-1].shape == (2, 9) and spy.seen[-1].max() < 32  # inputs: 4 + sep + 4
