"""The length-generalization report view: sentences and summaries computed from the numbers."""

from __future__ import annotations

import pytest

from posexp.commands.report.views.tasks import beyond_means, frontier, reading
from posexp.commands.train import check_same_network
from posexp.errors import PosexpError
from posexp.model import ModelConfig


def test_reading_follows_the_numbers():
    summary = {"copy": {"none": 0.6, "t5": 0.4, "sinusoidal": 0.0, "rope": 0.1, "rope_randomized": 0.3},
               "reverse": {"none": 0.1, "t5": 0.1, "sinusoidal": 0.1, "rope": 0.1}}
    lines = reading(summary)
    assert lines[0] == "- **copy**: best past the training sizes NoPE (0.60), worst sinusoidal (APE) (0.00)."
    assert "every PE scores 0.10" in lines[1]
    assert "NoPE or T5 is the best on 1, and sinusoidal among the worst on 1, of the 1 task(s)" in lines[2]
    assert "copy +0.200" in lines[3] and "higher on 1 of 1 tasks" in lines[3]
    summary["copy"]["rope"] = 0.9  # now RoPE leads: the sentences change with it
    lines = reading(summary)
    assert "best past the training sizes rope (0.90)" in lines[0]
    assert "NoPE or T5 is the best on 0" in lines[2] and "copy -0.600" in lines[3]


def test_summaries_use_only_sizes_past_training():
    table = {"rope": {4: 1.0, 8: 0.9, 12: 0.5, 16: 0.1}, "none": {4: 1.0, 8: 1.0, 12: 0.7, 16: 0.6}}
    assert beyond_means(table, 8) == pytest.approx({"rope": 0.3, "none": 0.65})
    assert frontier(table) == {"rope": 12, "none": 16}


def test_a_parent_run_must_have_the_same_network():
    mine = ModelConfig(vocab_size=260, d_model=64, n_layers=2, n_heads=2, pe="rope")
    parent = mine.to_dict()
    check_same_network(parent, mine)
    with pytest.raises(PosexpError, match="parent run has n_layers=4, this run n_layers=2"):
        check_same_network({**parent, "n_layers": 4}, mine)
