"""eval-extrapolate's plan: a length that cannot fit in memory is refused before any allocation."""

from __future__ import annotations

import pytest

from posexp.commands.extrapolate import plan as plan_mod
from posexp.commands.extrapolate.plan import Settings, forward_bytes, plan_run
from posexp.config import ExtrapolateConfig
from posexp.errors import PosexpError
from posexp.model import ModelConfig
from posexp.rundir import RunDir
from tests.test_rundir import make_run


def settings(lengths: str) -> Settings:
    return Settings(ExtrapolateConfig.from_dict({"lengths": lengths}, prefix="--"), device="cpu")


def test_a_length_that_cannot_fit_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    make_run(tmp_path / "run")
    run = RunDir(tmp_path / "run")
    assert plan_run(run, settings("32,64"), 1).items  # this machine has room for these
    monkeypatch.setattr(plan_mod, "available_memory", lambda device_type: 2**20)  # 1 MiB free
    with pytest.raises(
        PosexpError,
        match=r"^length 65,536 needs about \d+\.\d GiB for one forward pass of '.*run', and cpu "
        r"has 0\.0 GiB free; allowed: shorter --len / --lengths$",
    ):
        plan_run(run, settings("32,65536"), 1)


def test_the_estimate_counts_logits_activations_and_a_bias_block_per_head():
    model = ModelConfig(vocab_size=260, d_model=64, n_layers=2, n_heads=2)
    # Past batch_tokens one window is one row: L tokens of logits (twice: log-softmax) and
    # 8 d_model floats of activations each, plus two 128 x L bias blocks per head, 4 bytes each.
    length = 65536
    assert forward_bytes(length, 8192, model) == 4 * (
        length * (2 * 260 + 8 * 64) + 2 * 2 * 128 * length
    )
    # Short windows are batched up to batch_tokens rows' worth of tokens.
    assert forward_bytes(64, 8192, model) == 4 * (8192 * (2 * 260 + 8 * 64) + 2 * 2 * 128 * 64)


def test_a_default_token_count_other_than_the_runs_earlier_cells_is_said(caplog, tmp_path):
    from posexp.commands.extrapolate.cells import say_other_token_counts
    from posexp.scoring.records import Checkpoint, Record, Stored

    weights = Checkpoint(10, "0" * 16)
    earlier = [Record("none", n, "nonoverlap", 1.0, sample_size=16384) for n in (64, 128)]
    stored = Stored(earlier, [], weights)
    with caplog.at_level("WARNING", logger="posexp"):
        say_other_token_counts(tmp_path, stored, 16384, 4096)  # the same count: nothing said
        assert not caplog.records
        say_other_token_counts(tmp_path, stored, 32768, 8192)
        # Once some cells use the new count too, the new cells join their rows: nothing said.
        both = Stored(
            [*earlier, Record("none", 64, "nonoverlap", 1.0, sample_size=32768)], [], weights
        )
        say_other_token_counts(tmp_path, both, 32768, 8192)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "scoring 32,768 test tokens" in line and "earlier cells of this run used 16,384" in line
    assert line.endswith("eval-extrapolate --tokens 16384 adds to those")


def test_a_stride_longer_than_a_length_is_said(caplog, tmp_path):
    from posexp.commands.extrapolate.cells import say_short_lengths

    say_short_lengths(tmp_path / "run", 1000, [64, 128, 2048])
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("run: --stride 1000 is longer than 64, 128 tokens: there")
    caplog.clear()
    say_short_lengths(tmp_path / "run", 32, [64, 128])
    assert not caplog.records


def test_a_test_split_smaller_than_the_tokens_asked_for_is_said(caplog, tmp_path):
    from posexp.commands.extrapolate.cells import say_capped_tokens

    with caplog.at_level("WARNING", logger="posexp"):
        assert say_capped_tokens(tmp_path / "run", 16384, 100_000) == 16384  # it fits: nothing
        assert not caplog.records
        assert say_capped_tokens(tmp_path / "run", 16384, 1290) == 1289
    (line,) = [r.getMessage() for r in caplog.records]
    assert (
        line
        == "run: the test split holds 1,290 tokens, so each length scores 1,289 of the 16,384 asked for"
    )
