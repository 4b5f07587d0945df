"""scripts/passkey.py's stopping rule: the passkey stage trains until every depth is retrieved."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from tests.helpers import load_script

HEADER = "method,length,protocol,factor,ppl,loss,tokens,seconds,note,metric,accuracy,examples,depth,precision\n"


@pytest.fixture
def script():
    return load_script("passkey")


def fake_stage(out: Path, step: int, accuracies: list[float], lengths=(122,)) -> Path:
    """A passkey run dir that finished at ``step`` and was scored (none) at ``accuracies`` per depth."""
    run = out / "passkey"
    (run / "eval").mkdir(parents=True, exist_ok=True)
    (run / "results.json").write_text(json.dumps({"status": "completed", "step": step}))
    rows = [
        f"none,{n},exact_match,1.0,1,0,300,0.1,,accuracy,{a},50,{d},fp32\n"
        for n in lengths
        for a, d in zip(accuracies, (0.0, 0.5, 1.0), strict=True)
    ]
    table = run / "eval" / "extrapolate.csv"
    table.write_text(HEADER + "".join(rows))
    os.utime(table, (os.stat(run / "results.json").st_mtime + 1,) * 2)
    return run


def options(**changes) -> argparse.Namespace:
    base = dict(retrieval_target=0.9, extend_steps=2000, passkey_max_steps=10000, device="cpu")
    return argparse.Namespace(**(base | changes))


def evaluation(run: Path) -> tuple[str, ...]:
    """The criterion's evaluation: none at L0 (it scores only what these weights lack)."""
    return (
        "eval-extrapolate",
        "--run",
        str(run),
        "--lengths",
        "122",
        "--method",
        "none",
        "--device",
        "cpu",
    )


def test_worst_depth_below_target_trains_another_block(script, tmp_path, monkeypatch):
    fake_stage(tmp_path, 4000, [0.04, 0.98, 0.92])
    calls = []

    def posexp(*args):  # the resume "trains" to every depth retrieved
        calls.append(args)
        if args[0] == "train":
            fake_stage(tmp_path, 6000, [0.95, 1.0, 1.0])

    monkeypatch.setattr(script, "posexp", posexp)
    script.train_to_criterion(options(), tmp_path)
    run = tmp_path / "passkey"
    assert calls == [
        evaluation(run),
        ("train", f"resume={run}", "train.max_steps=6000"),
        evaluation(run),
    ]


def test_stops_at_the_target_or_the_cap(script, tmp_path, monkeypatch):
    def posexp(*args):
        if args[0] != "eval-extrapolate":
            pytest.fail(f"unexpected {args}")

    monkeypatch.setattr(script, "posexp", posexp)
    fake_stage(tmp_path, 4000, [0.9, 1.0, 0.95])
    script.train_to_criterion(options(), tmp_path)  # 0.9 meets the target
    fake_stage(tmp_path, 10000, [0.1, 0.2, 0.3])
    script.train_to_criterion(options(), tmp_path)  # at the cap: no further block


def test_fine_tunes_of_the_current_weights_block_an_extension(script, tmp_path, monkeypatch):
    run = fake_stage(tmp_path, 4000, [0.5, 1.0, 1.0])
    evaluated = []
    monkeypatch.setattr(script, "posexp", lambda *a: evaluated.append(a))
    (tmp_path / "ft_pi").mkdir()
    with pytest.raises(SystemExit, match="ft_pi were fine-tuned from its current weights"):
        script.train_to_criterion(options(), tmp_path)
    assert evaluated == [evaluation(run)]


def test_each_method_spec_fine_tunes_in_its_own_folder(script):
    assert script.run_dir_name("yarn") == "ft_yarn"
    assert script.run_dir_name("yarn(beta_fast=8)") == "ft_yarn_beta_fast=8"
    assert (
        script.run_dir_name("self_extend(group=4,window=16)") == "ft_self_extend_group=4_window=16"
    )
