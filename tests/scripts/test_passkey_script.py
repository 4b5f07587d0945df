"""scripts/passkey.py's stopping rule: the passkey stage trains until every depth is retrieved."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "passkey.py"
HEADER = "method,length,protocol,factor,ppl,loss,tokens,seconds,note,metric,accuracy,examples,depth,precision\n"


@pytest.fixture
def script():
    spec = importlib.util.spec_from_file_location("passkey_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_worst_depth_below_target_trains_another_block(script, tmp_path, monkeypatch):
    fake_stage(tmp_path, 4000, [0.04, 0.98, 0.92])
    calls = []

    def posexp(*args):  # the resume "trains" to every depth retrieved
        calls.append(args)
        fake_stage(tmp_path, 6000, [0.95, 1.0, 1.0])

    monkeypatch.setattr(script, "posexp", posexp)
    script.train_to_criterion(options(), tmp_path)
    run = tmp_path / "passkey"
    assert calls == [("train", f"resume={run}", "train.max_steps=6000")]


def test_stops_at_the_target_or_the_cap(script, tmp_path, monkeypatch):
    monkeypatch.setattr(script, "posexp", lambda *a: pytest.fail(f"unexpected {a}"))
    fake_stage(tmp_path, 4000, [0.9, 1.0, 0.95])
    script.train_to_criterion(options(), tmp_path)  # 0.9 meets the target
    fake_stage(tmp_path, 10000, [0.1, 0.2, 0.3])
    script.train_to_criterion(options(), tmp_path)  # at the cap: no further block


def test_a_stale_evaluation_is_redone_and_fine_tunes_block_an_extension(
    script, tmp_path, monkeypatch
):
    run = fake_stage(tmp_path, 4000, [0.5, 1.0, 1.0])
    os.utime(run / "eval" / "extrapolate.csv", (0, 0))  # older than the weights
    evaluated = []
    monkeypatch.setattr(
        script,
        "posexp",
        lambda *a: evaluated.append(a) or fake_stage(tmp_path, 4000, [0.5, 1.0, 1.0]),
    )
    (tmp_path / "ft_pi").mkdir()
    with pytest.raises(SystemExit, match="ft_pi were fine-tuned from its current weights"):
        script.train_to_criterion(options(), tmp_path)
    assert evaluated == [
        ("eval-extrapolate", "--run", str(run), "--lengths", "122", "--method", "none")
    ]


def test_the_full_evaluation_counts_only_when_it_reaches_8x(script, tmp_path):
    run = fake_stage(tmp_path, 4000, [1.0, 1.0, 1.0])
    (run / "provenance.json").write_text(json.dumps({"status": "completed"}))
    assert not script.evaluated_to_8x(run)
    fake_stage(tmp_path, 4000, [1.0, 1.0, 1.0], lengths=(122, 1018))
    assert script.evaluated_to_8x(run)
