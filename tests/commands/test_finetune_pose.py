"""`posexp finetune` with PoSE: the window, the target and the extension's factor, end to end."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from unittest import mock

import pytest
import torch

from posexp.commands.train import run_training
from posexp.config import RunConfig
from posexp.store.checkpoint import read_meta
from tests.helpers import TINY, posexp, run_dirs, train_killed_halfway, weights_sha256

FT = [
    "train.max_steps=4",
    "train.eval_interval=2",
    "train.eval_tokens=512",
    "train.checkpoint_interval=2",
    "train.warmup_steps=1",
    "train.batch_size=2",
    # One thread in the CLI run and in the resumed one: a bit-identical comparison needs the
    # same reduction order (torch's default thread count differs from the test process's).
    "train.threads=1",
]


@pytest.fixture(scope="module")
def parent(tmp_path_factory, cache):
    cwd = tmp_path_factory.mktemp("finetune_pose")
    posexp(cwd, cache, "train", "pe=rope", *TINY)  # L0 = 32
    (run,) = run_dirs(cwd)
    return cwd, run


def effective(run, *overrides: str, data: str = "kjv"):
    """The fine-tune's effective config (``finetune_config``) for ``overrides``, composed with
    the parent's ``data`` (as ``posexp finetune`` composes it)."""
    from hydra import compose, initialize_config_dir

    from posexp.commands.finetune import finetune_config
    from posexp.config.paths import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("finetune", [f"parent={run}", f"data={data}", *overrides])
    return finetune_config(cfg, list(overrides))


def lengths(merged) -> tuple:
    return (
        merged.train.seq_len,
        merged.train.pose.target_length,
        merged.extension.method,
        merged.extension.factor,
    )


def test_the_window_is_the_parents_length_and_the_target_its_extension(parent):
    _, run = parent
    on = "train.pose.enabled=true"
    assert lengths(effective(run, "extension=yarn", "extension.factor=4", on)) == (
        32,
        128,
        "yarn",
        4.0,
    )
    # A target given without the factor sets the factor: the method is set up for the target.
    assert lengths(effective(run, "extension=pi", "train.pose.target_length=96", on)) == (
        32,
        96,
        "pi",
        3.0,
    )
    # An explicit window; no extension (positions alone are extended).
    merged = effective(run, "extension=none", "train.pose.target_length=80", "train.seq_len=16", on)
    assert lengths(merged) == (16, 80, "none", 1.0)
    # Off: the window is the longer length, as without PoSE.
    assert lengths(effective(run, "extension=yarn", "extension.factor=4"))[:2] == (128, None)


def test_a_target_and_factor_that_disagree_are_kept_and_said(parent, caplog):
    _, run = parent
    with caplog.at_level(logging.WARNING, logger="posexp"):
        merged = effective(
            run,
            "extension=yarn",
            "extension.factor=4",
            "train.pose.enabled=true",
            "train.pose.target_length=64",
        )
    assert lengths(merged) == (32, 64, "yarn", 4.0)
    assert "train.pose.target_length=64, but extension yarn is set up for 128" in caplog.text


def test_a_pose_finetune_trains_resumes_exactly_and_says_so(parent, cache, tmp_path):
    cwd, run = parent
    rel = str(run.relative_to(cwd))
    args = ["extension=yarn", "extension.factor=4", "train.pose.enabled=true", *FT]
    posexp(cwd, cache, "finetune", "--run", rel, *args)
    ft = run_dirs(cwd)[-1]
    meta = read_meta(ft)
    saved = meta["config"]
    assert saved["train"]["seq_len"] == 32 and saved["train_length"] == 32
    assert saved["train"]["pose"] == {"enabled": True, "target_length": 128, "chunks": 2}
    ext = meta["model"]["extension"]
    assert (ext["method"], ext["factor"], ext["original_length"]) == ("yarn", 4.0, 32)
    assert json.loads((ft / "results.json").read_text())["status"] == "completed"
    logged = (ft / "finetune.log").read_text()
    assert "PoSE on: window 32, target 128, 2 chunks" in logged
    assert "with extension yarn (factor 4.0) and PoSE (target 128, 2 chunks)" in logged

    # The same fine-tune, killed after its middle checkpoint and resumed, ends bit-identical;
    # the positions the model trained on skip past the window and stay below the target.
    from posexp.runtime.trainer import Trainer

    cfg = RunConfig.from_saved(saved)
    seen = []
    positions = Trainer.positions

    def spy(self, shape, rows, targets=None):
        drawn = positions(self, shape, rows, targets)
        seen.append(drawn)
        return drawn

    with contextlib.chdir(cwd), mock.patch.object(Trainer, "positions", spy):
        with pytest.MonkeyPatch.context() as mp:
            train_killed_halfway(cfg, tmp_path / "cut", mp)
        run_training(cfg.replace(resume=str(tmp_path / "cut")), tmp_path / "cut")
    assert weights_sha256(ft) == weights_sha256(tmp_path / "cut")
    assert len(seen) == 4 and all(p.shape == (2, 32) and p[:, 0].eq(0).all() for p in seen)
    top = max(int(p.max()) for p in seen)
    assert 32 <= top < 128


BAD = {
    "no target past the parent's length": (
        ["extension=yarn", "train.pose.enabled=true"],
        "finetune with PoSE needs train.pose.target_length longer than the parent's training "
        "length 32, got 32",
    ),
    "one chunk": (
        ["extension=yarn", "extension.factor=4", "train.pose.enabled=true", "train.pose.chunks=1"],
        "train.pose.chunks must be an integer >= 2, got 1",
    ),
    "a window as long as the target": (
        ["extension=yarn", "extension.factor=4", "train.pose.enabled=true", "train.seq_len=128"],
        "train.pose.target_length=128 must be above the train.seq_len=128 window",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_pose_finetune_is_one_line(parent, name, monkeypatch, capsys):
    refused_in_one_line(parent, *BAD[name], monkeypatch, capsys)


def refused_in_one_line(parent, args, message, monkeypatch, capsys) -> None:
    """``posexp finetune --run <parent> ARGS`` exits 2 with one error line holding ``message``,
    and leaves no run dir."""
    from posexp.cli import main

    cwd, run = parent
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["posexp", "finetune", "--run", str(run), *args, *FT])
    before = run_dirs(cwd)
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err
    assert run_dirs(cwd) == before  # no run dir left behind


# ---- a synthetic-task parent: task rows whole, positions skipped ---------------------------------

# copy rows of sizes 1-10: up to 10 + 1 + 10 = 21 tokens, the PoSE window; train.seq_len (L0 = 32)
# only bounds them.
COPY = ["data=copy", "data.train_lengths=[1,10]", "data.val_examples=4"]


@pytest.fixture(scope="module")
def task_parent(tmp_path_factory, cache):
    cwd = tmp_path_factory.mktemp("finetune_pose_task")
    posexp(cwd, cache, "train", "pe=rope", *TINY, *COPY)
    (run,) = run_dirs(cwd)
    return cwd, run


def test_a_task_parents_window_is_its_longest_row(task_parent):
    _, run = task_parent
    on = "train.pose.enabled=true"
    # Lt = 21 x 4; train.seq_len keeps the parent's 32, a bound on the rows; sizes kept.
    merged = effective(run, "extension=yarn", "extension.factor=4", on, data="synthetic")
    assert lengths(merged) == (32, 84, "yarn", 4.0)
    assert list(merged.data.train_lengths) == [1, 10]
    # A target given without the factor: s = Lt / 21.
    merged = effective(run, "extension=pi", "train.pose.target_length=63", on, data="synthetic")
    assert lengths(merged) == (32, 63, "pi", 3.0)
    # Shorter rows than the parent's fit the window.
    shorter = "data.train_lengths=[1,5]"
    merged = effective(run, "extension=yarn", "extension.factor=4", shorter, on, data="synthetic")
    assert lengths(merged)[:2] == (32, 84)


def test_a_pose_finetune_of_a_task_parent_trains_resumes_exactly_and_says_so(
    task_parent, cache, tmp_path
):
    cwd, run = task_parent
    rel = str(run.relative_to(cwd))
    args = ["extension=yarn", "extension.factor=4", "train.pose.enabled=true", *FT]
    posexp(cwd, cache, "finetune", "--run", rel, *args)
    ft = run_dirs(cwd)[-1]
    meta = read_meta(ft)
    saved = meta["config"]
    assert saved["train"]["seq_len"] == 32 and saved["train_length"] == 32
    assert saved["data"]["train_lengths"] == [1, 10]
    assert saved["train"]["pose"] == {"enabled": True, "target_length": 84, "chunks": 2}
    ext = meta["model"]["extension"]
    assert (ext["method"], ext["factor"]) == ("yarn", 4.0)
    results = json.loads((ft / "results.json").read_text())
    assert results["status"] == "completed" and "final/val_accuracy" in results
    logged = (ft / "finetune.log").read_text()
    assert "PoSE on: window 21, target 84, 2 chunks" in logged
    assert "with extension yarn (factor 4.0) and PoSE (target 84, 2 chunks)" in logged

    # Killed after its middle checkpoint and resumed, it ends bit-identical. The model trained
    # on the task rows at PoSE positions (each row's chunks inside its own tokens, skips up to
    # 84 - 21) and validated them at 0..T-1.
    from posexp.model import GPT
    from posexp.positions.pose import filled_lengths, pose_positions

    cfg = RunConfig.from_saved(saved)
    calls = []
    forward = GPT.forward

    def spy(self, idx, targets=None, positions=None, *args, **kwargs):
        calls.append((self.training, targets, positions))
        return forward(self, idx, targets, positions, *args, **kwargs)

    with contextlib.chdir(cwd), mock.patch.object(GPT, "forward", spy):
        with pytest.MonkeyPatch.context() as mp:
            train_killed_halfway(cfg, tmp_path / "cut", mp)
        run_training(cfg.replace(resume=str(tmp_path / "cut")), tmp_path / "cut")
    assert weights_sha256(ft) == weights_sha256(tmp_path / "cut")
    trained = [(y, p) for training, y, p in calls if training]
    assert len(trained) == 4
    for step, (y, p) in enumerate(trained):
        assert p.shape == y.shape == (2, 21)
        assert torch.equal(p, pose_positions(2, 21, 84, 2, cfg.seed, step, filled_lengths(y)))
    assert 21 <= max(int(p.max()) for _, p in trained) < 84
    assert all(p is None for training, _, p in calls if not training)


TASK_BAD = {
    # copy and reverse share data.source (synthetic): the task itself tells them apart.
    "another task": (
        ["data=reverse", "extension=yarn", "extension.factor=2"],
        "finetune keeps the parent's data (data=copy); drop data=",
    ),
    # data.symbols is copy's (configs/data/copy.yaml), not synthetic's: it was "unknown".
    "a key of the task's own group": (
        ["data.symbols=4", "extension=yarn", "extension.factor=2"],
        "finetune keeps the parent's data (data=copy); drop data.symbols=",
    ),
    "rows longer than the window": (
        [
            "extension=yarn",
            "extension.factor=4",
            "train.pose.enabled=true",
            "data.train_lengths=[1,20]",
        ],
        "finetune with PoSE trains task rows within the window, the parent's longest training row "
        "(21 tokens); data.train_lengths=[1, 20] makes rows of 41 tokens; keep "
        "data.train_lengths within the parent's [1, 10], or drop train.pose.enabled for a "
        "full-length fine-tune",
    ),
    "no target past the parent's longest row": (
        ["extension=yarn", "train.pose.enabled=true"],
        "finetune with PoSE needs train.pose.target_length longer than the parent's longest "
        "training row (21 tokens), got 21",
    ),
    "more chunks than the window": (
        ["extension=yarn", "extension.factor=4", "train.pose.enabled=true", "train.pose.chunks=22"],
        "train.pose.chunks=22 is more chunks than the 21 tokens of a window (the longest training "
        "row of data.train_lengths=[1, 10])",
    ),
}


@pytest.mark.parametrize("name", sorted(TASK_BAD))
def test_bad_pose_finetune_of_a_task_parent_is_one_line(task_parent, name, monkeypatch, capsys):
    refused_in_one_line(task_parent, *TASK_BAD[name], monkeypatch, capsys)
