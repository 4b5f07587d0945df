"""`posexp runs`: every run under a folder, from the run dirs' own files."""

import json

import pytest
import torch
from typer.testing import CliRunner

from posexp.checkpoint import save_checkpoint
from posexp.cli import app
from posexp.model import GPT, ModelConfig
from tests.helpers import run_config


def make_run(path, pe, heads, step, total, results=None, minutes=None):
    mcfg = ModelConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=heads, pe=pe)
    config = run_config(f"heads={heads}", f"train.max_steps={total}").to_dict()
    save_checkpoint(path, GPT(mcfg), {"step": step, "model": mcfg.to_dict(), "config": config})
    if results is not None:
        (path / "results.json").write_text(json.dumps(results))
    if minutes is not None:
        sessions = [
            {
                "started": "2026-01-01T00:00:00+00:00",
                "ended": f"2026-01-01T00:{minutes:02d}:00+00:00",
            }
        ]
        (path / "provenance.json").write_text(json.dumps({"sessions": sessions}))


def test_runs_lists_finished_failed_and_unfinished_runs(tmp_path):
    torch.manual_seed(0)
    make_run(
        tmp_path / "runs" / "a", "rope", 2, 10, 10, {"status": "completed", "final/val_ppl": 3.5}, 7
    )
    make_run(
        tmp_path / "sweeps" / "s" / "heads=4", "alibi", 4, 5, 10, {"status": "failed", "error": "x"}
    )
    make_run(tmp_path / "runs" / "b", "t5", 1, 3, 10)
    result = CliRunner().invoke(app, ["runs", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["run"]: r for r in json.loads(result.output)}
    assert rows["runs/a"] == {
        "run": "runs/a",
        "data": "kjv",
        "pe": "rope",
        "heads": 2,
        "extension": "none",
        "steps": "10/10",
        "status": "completed",
        "val_ppl": 3.5,
        "val_acc": None,
        "bleu": None,
        "minutes": 7.0,
    }
    assert (
        rows["sweeps/s/heads=4"]["status"] == "failed" and rows["sweeps/s/heads=4"]["pe"] == "alibi"
    )
    assert rows["runs/b"]["status"] == "unfinished" and rows["runs/b"]["steps"] == "3/10"
    table = CliRunner().invoke(app, ["runs", str(tmp_path)])
    assert table.exit_code == 0 and "runs/a" in table.output and "unfinished" in table.output


def test_runs_on_a_missing_folder_is_a_one_line_error(tmp_path):
    from posexp.commands.runs import list_runs
    from posexp.errors import PosexpError

    with pytest.raises(PosexpError, match=r"^runs: no such directory .*nothing"):
        list_runs(tmp_path / "nothing")
