"""`posexp runs`: every run under a folder, from the run dirs' own files."""

import json

import pytest
import torch
from typer.testing import CliRunner

from posexp.checkpoint import save_checkpoint
from posexp.cli import app
from posexp.model import GPT, ModelConfig
from tests.helpers import run_config


def make_run(path, pe, heads, step, total, results=None, minutes=None, hour=0):
    mcfg = ModelConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=heads, pe=pe)
    config = run_config(f"heads={heads}", f"train.max_steps={total}").to_dict()
    save_checkpoint(path, GPT(mcfg), {"step": step, "model": mcfg.to_dict(), "config": config})
    if results is not None:
        (path / "results.json").write_text(json.dumps(results))
    if minutes is not None:
        sessions = [
            {
                "started": f"2026-01-01T{hour:02d}:00:00+00:00",
                "ended": f"2026-01-01T{hour:02d}:{minutes:02d}:00+00:00",
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
        "model": "small",
        "seq_len": 256,
        "pe": "rope",
        "heads": 2,
        "extension": "none",
        "step": 10,
        "max_steps": 10,
        "status": "completed",
        "val_ppl": 3.5,
        "val_acc": None,
        "bleu": None,
        "minutes": 7.0,
        "started": "2026-01-01T00:00:00+00:00",
        "unreadable": [],
    }
    assert (
        rows["sweeps/s/heads=4"]["status"] == "failed" and rows["sweeps/s/heads=4"]["pe"] == "alibi"
    )
    assert rows["runs/b"]["status"] == "unfinished" and (
        rows["runs/b"]["step"],
        rows["runs/b"]["max_steps"],
    ) == (3, 10)
    table = CliRunner().invoke(app, ["runs", str(tmp_path)])
    assert table.exit_code == 0 and "runs/a" in table.output and "unfinished" in table.output


def test_runs_on_a_missing_folder_is_a_one_line_error(tmp_path):
    from posexp.commands.runs import list_runs
    from posexp.errors import PosexpError

    with pytest.raises(PosexpError, match=r"^runs: no such directory .*nothing"):
        list_runs(tmp_path / "nothing")


def test_runs_sort_by_start_time_and_fit_100_columns(tmp_path):
    from rich.console import Console

    from posexp.commands.runs import list_runs, print_runs

    torch.manual_seed(0)
    long_name = "heads=4,model=small,pe=alibi,seed=0,train.max_steps=60,train.threads=1_abc"
    make_run(tmp_path / "late", "rope", 2, 10, 10, {"status": "completed"}, 5, hour=3)
    make_run(
        tmp_path / long_name,
        "alibi",
        4,
        10,
        10,
        {"status": "completed", "final/val_ppl": 3.5},
        5,
        hour=1,
    )
    (tmp_path / "late" / "eval").mkdir()  # evaluating a run later does not move it
    rows = list_runs(tmp_path)
    assert [r["run"] for r in rows] == [long_name, "late"]
    console = Console(width=100, record=True)
    print_runs(rows, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    header = text.splitlines()[1]
    for column in ("pe", "h", "steps", "status", "val ppl", "model", "seq"):
        assert f" {column} " in f" {header} "
    assert "alibi" in text and "3.50" in text and "…" not in text
    # Columns empty in every row (accuracy, BLEU, extensions) only with --wide.
    assert "BLEU" not in header
    wide = Console(width=200, record=True)
    print_runs(rows, wide, wide=True)
    assert "BLEU" in wide.export_text()


def test_a_table_with_every_column_still_fits_100_columns():
    from rich.console import Console

    from posexp.commands.runs import print_runs

    row = {
        "run": "pe=alibi,seed=0",
        "data": "wyc2kjv_translation_pairs",
        "model": "head-ablation",
        "seq_len": 96,
        "pe": "sinusoidal",
        "heads": 16,
        "extension": "yarn x4",
        "step": 1200,
        "max_steps": 1200,
        "status": "completed",
        "val_ppl": 46.91,
        "val_acc": 0.512,
        "bleu": 3.47,
        "minutes": 6.2,
    }
    console = Console(width=100, record=True)
    print_runs([row], console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 100
    for column in ("run", "pe", "h", "ext", "steps", "status", "val ppl"):
        assert f" {column} " in f" {lines[1]} "
    assert "yarn x4" in lines[3] and "46.91" in lines[3] and "1200/1200" in lines[3]
    assert lines[-1].startswith("(hidden at this width: min") and "--wide" in lines[-1]


def test_runs_with_no_runs_yet_is_an_empty_list_not_an_error(tmp_path):
    from typer.testing import CliRunner

    from posexp.cli import app

    (tmp_path / "empty").mkdir()
    for folder in (str(tmp_path / "empty"),):
        result = CliRunner().invoke(app, ["runs", folder, "--json"])
        assert result.exit_code == 0 and json.loads(result.output) == []
        text = CliRunner().invoke(app, ["runs", folder])
        assert (
            text.exit_code == 0
            and text.output.strip() == "no runs yet (train one with `posexp train`)"
        )
