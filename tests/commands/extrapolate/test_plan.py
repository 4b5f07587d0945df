"""eval-extrapolate's plan: a length that cannot fit in memory is refused before any allocation."""

from __future__ import annotations

import pytest

from posexp.commands.extrapolate import plan as plan_mod
from posexp.commands.extrapolate.plan import Settings, forward_bytes, plan_run
from posexp.config import ExtrapolateConfig
from posexp.errors import PosexpError
from posexp.model import ModelConfig
from posexp.store.rundir import RunDir
from tests.store.test_rundir import make_run


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


def ruler_run(path, *overrides):
    """A ruler-mixture run dir with a real checkpoint of a tiny model (untrained)."""
    from posexp.model import GPT
    from posexp.store.checkpoint import save_checkpoint
    from tests.helpers import run_config

    cfg = run_config("model=tiny", "data=ruler", *overrides)
    model = GPT(ModelConfig(vocab_size=260, d_model=64, n_layers=2, n_heads=4, train_length=256))
    save_checkpoint(path, model, {"step": 3, "model": model.cfg.to_dict(), "config": cfg.to_dict()})
    return RunDir(path)


def cells(plan) -> set[tuple]:
    return {(i.record.length, i.record.task, i.record.depth) for i in plan.items}


def test_a_mixture_scores_the_tasks_a_length_fits_and_names_the_others(caplog, tmp_path):
    # --lengths 128 failed the whole RULER evaluation on niah_multikey's smallest size (178).
    run = ruler_run(tmp_path / "run", "data.tasks=[niah_single,niah_multikey,variable_tracking]")
    asked = Settings(
        ExtrapolateConfig.from_dict({"lengths": "128,200", "method": "none"}, prefix="--"),
        device="cpu",
    )
    with caplog.at_level("WARNING", logger="posexp"):
        plan = plan_run(run, asked, 1)
    depths = (0.0, 0.25, 0.5, 0.75, 1.0)
    assert cells(plan) == {
        *((n, "niah_single", d) for n in (128, 200) for d in depths),
        *((200, "niah_multikey", d) for d in depths),
        (128, "variable_tracking", None),
        (200, "variable_tracking", None),
    }
    said = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert said == [
        "run: skipping the tasks a length is too short for: niah_multikey at 128 (needs >= 178)"
    ]


def test_depths_given_score_a_mixtures_needle_tasks(tmp_path):
    # --depths on a ruler run was refused as if it were a task without key depths.
    run = ruler_run(tmp_path / "run", "data.tasks=[niah_single,variable_tracking]")
    asked = Settings(
        ExtrapolateConfig.from_dict(
            {"lengths": "226", "method": "none", "depths": "0.1,0.9"}, prefix="--"
        ),
        device="cpu",
    )
    assert cells(plan_run(run, asked, 1)) == {
        (226, "niah_single", 0.1),
        (226, "niah_single", 0.9),
        (226, "variable_tracking", None),
    }
