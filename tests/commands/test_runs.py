"""`posexp runs`: every run under a folder, from the run dirs' own files."""

import json
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from posexp.cli import app
from posexp.extension import ExtensionConfig
from posexp.model import GPT, ModelConfig
from posexp.store.checkpoint import save_checkpoint
from tests.helpers import run_config


def make_run(
    path,
    pe,
    heads,
    step,
    total,
    results=None,
    minutes=None,
    hour=0,
    extension=None,
    parent=None,
    overrides=(),
):
    mcfg = ModelConfig(
        vocab_size=20,
        d_model=16,
        n_layers=1,
        n_heads=heads,
        pe=pe,
        extension=extension or ExtensionConfig(),
    )
    # Quoted: a parent named like a sweep job (`pe=rope,seed=0`) is one value, not a list.
    extra = [] if parent is None else [f"parent='{parent}'"]
    config = run_config(f"heads={heads}", f"train.max_steps={total}", *extra, *overrides).to_dict()
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
        "seed": 0,
        "data": "kjv",
        "model": "small",
        "seq_len": 256,
        "pe": "rope",
        "pe_label": "RoPE",
        "heads": 2,
        "extension": "none",
        "factor": None,
        "parent": None,
        "step": 10,
        "max_steps": 10,
        "status": "completed",
        "val_ppl": 3.5,
        "val_acc": None,
        "bleu": None,
        "evaluated": None,
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


def test_runs_piped_end_each_line_at_its_last_character(tmp_path):
    # Piped, rich padded every line of the table to its width (lines of 105 spaces and more).
    torch.manual_seed(0)
    make_run(tmp_path / "a", "rope", 2, 10, 10, {"status": "completed", "final/val_ppl": 3.5}, 7)
    make_run(tmp_path / "a_much_longer_name", "alibi", 2, 5, 10, {"status": "failed"}, 3)
    for args in ([], ["--wide"]):
        out = CliRunner().invoke(app, ["runs", str(tmp_path), *args], env={"COLUMNS": None})
        assert out.exit_code == 0 and "a_much_longer_name" in out.output
        lines = out.output.splitlines()
        assert [line for line in lines if line.endswith(" ")] == []
        # The table starts at its header (the box's blank top edge once came first), one space
        # in from the margin as on a terminal, and a blank line still parts it from what follows.
        assert lines[0].startswith(" run ") and lines[1].lstrip().startswith("─")
        assert lines[4] == "" and (args or lines[5].startswith("same in every run: "))


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
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    header = lines[0]
    for column in ("run", "pe", "h", "val ppl"):
        assert f" {column} " in f" {header} "
    assert long_name in lines[2] and "alibi" in lines[2] and "3.50" in lines[2]
    # The settings both runs share are named once under the table instead of as columns.
    same = (
        "same in every run: data kjv, model small, seq 256, seed 0, steps 10/10, status completed"
    )
    assert same in text
    assert "model" not in header and "BLEU" not in header
    # Narrower, the long name stays one line: its start and end kept, the middle left out.
    narrow = Console(width=60, record=True)
    print_runs(rows, narrow)
    lines = narrow.export_text().splitlines()
    assert max(len(line) for line in lines) <= 60
    name = lines[2].split()[0]
    assert name.startswith("heads=4") and name.endswith("threads=1_abc") and "…" in name
    assert lines[3].split()[0] == "late" and "3.50" in lines[2]
    # Columns empty in every row (accuracy, BLEU, extensions) only with --wide.
    wide = Console(width=300, record=True)
    print_runs(rows, wide, wide=True)
    text = wide.export_text()
    assert "BLEU" in text and long_name in text and "same in every run" not in text


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
        "extension": "yarn",
        "factor": 4.0,
        "parent": "runs/base",
        "step": 1200,
        "max_steps": 1200,
        "status": "completed",
        "val_ppl": 46.91,
        "val_acc": 0.512,
        "bleu": 3.47,
        "evaluated": {"methods": ["none", "yarn", "pi"], "longest": 4096, "cells": 18},
        "minutes": 6.2,
    }
    console = Console(width=100, record=True)
    print_runs([row], console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 100
    for column in ("run", "pe", "h", "ext", "parent", "steps", "status", "val ppl"):
        assert f" {column} " in f" {lines[0]} "
    assert "yarn x4" in lines[2] and "46.91" in lines[2] and "1200/1200" in lines[2]
    assert "runs/base" in lines[2] and "pe=alibi,seed=0" in lines[2]
    assert lines[-1].startswith("(hidden at this width: min") and "--wide" in lines[-1]
    wide = Console(width=250, record=True)
    print_runs([row], wide, wide=True)
    assert "3 methods ≤4096" in wide.export_text()


def write_records(run_path, methods, lengths):
    """eval/extrapolate.json as eval-extrapolate writes it: a cell per method and length, of
    the run's current weights."""
    from posexp.extension.spec import parse_spec
    from posexp.scoring.records import Record, checkpoint_of
    from posexp.store.rundir import RunDir

    now = checkpoint_of(RunDir(run_path))
    records = [
        Record(parse_spec(m), n, "nonoverlap", 1.0, checkpoint=now, values={"ppl": 9.0}).to_dict()
        for m in methods
        for n in lengths
    ]
    (run_path / "eval").mkdir(exist_ok=True)
    (run_path / "eval" / "extrapolate.json").write_text(json.dumps(records))


def sweep_and_finetune(root):
    """A 4-job sweep under outputs-like folders, one job evaluated, and a fine-tune of it."""
    sweep = root / "sweeps" / "2026-01-01_00-00-00"
    jobs = [(pe, seed) for pe in ("rope", "alibi") for seed in (0, 1)]
    for hour, (pe, seed) in enumerate(jobs):
        results = {"status": "completed", "final/val_ppl": 20.0 + hour}
        job = sweep / f"pe={pe},seed={seed}"
        make_run(job, pe, 4, 40, 40, results, 1, hour=hour, overrides=(f"seed={seed}",))
    parent = sweep / "pe=rope,seed=0"
    write_records(parent, ["none", "yarn", "pi"], [64, 128, 256])
    make_run(
        root / "runs" / "2026-01-01_05-00-00_kjv_ft-yarn",
        "rope",
        4,
        20,
        20,
        {"status": "completed", "final/val_ppl": 18.9},
        1,
        hour=5,
        extension=ExtensionConfig("yarn", 4.0),
        parent=parent,
    )
    return sweep


def test_runs_json_names_a_finetunes_parent_its_factor_and_what_was_evaluated(tmp_path):
    torch.manual_seed(0)
    sweep_and_finetune(tmp_path)
    result = CliRunner().invoke(app, ["runs", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["run"]: r for r in json.loads(result.output)}
    parent = "sweeps/2026-01-01_00-00-00/pe=rope,seed=0"
    ft = rows["runs/2026-01-01_05-00-00_kjv_ft-yarn"]
    assert (ft["extension"], ft["factor"], ft["parent"]) == ("yarn", 4.0, parent)
    assert ft["evaluated"] is None
    assert rows[parent]["evaluated"] == {
        "methods": ["none", "yarn", "pi"],
        "longest": 256,
        "cells": 9,
    }
    assert (rows[parent]["parent"], rows[parent]["factor"]) == (None, None)
    # every run's seed: the sweep's jobs' own, the fine-tune's (its config's default, 0)
    seeds = {name: r["seed"] for name, r in rows.items()}
    assert seeds["sweeps/2026-01-01_00-00-00/pe=alibi,seed=1"] == 1
    assert seeds["sweeps/2026-01-01_00-00-00/pe=rope,seed=0"] == 0
    assert all(isinstance(s, int) for s in seeds.values())
    # A parent outside the listed folder keeps the path the fine-tune recorded.
    inside = CliRunner().invoke(app, ["runs", str(tmp_path / "runs"), "--json"])
    (row,) = json.loads(inside.output)
    assert row["parent"] == str(tmp_path / "sweeps" / "2026-01-01_00-00-00" / "pe=rope,seed=0")


def test_runs_at_80_columns_keep_each_run_on_one_line(tmp_path):
    from rich.console import Console

    from posexp.commands.runs import list_runs, print_runs

    torch.manual_seed(0)
    sweep_and_finetune(tmp_path)
    console = Console(width=80, record=True)
    print_runs(list_runs(tmp_path), console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    body = [line for line in lines[2:] if line.strip()][:5]
    names = [line.split()[0] for line in body]
    # One line per run, each name whole: the parent column (a fine-tune's name ends in its
    # method already) gives way first, and the footer says so.
    assert [n.rpartition("/")[2] for n in names[:4]] == [
        "pe=rope,seed=0",
        "pe=rope,seed=1",
        "pe=alibi,seed=0",
        "pe=alibi,seed=1",
    ]
    assert all(n.startswith("sweeps/2026-01-01_00-00-00/") for n in names[:4])
    assert names[4] == "runs/2026-01-01_05-00-00_kjv_ft-yarn" and "yarn x4" in body[4]
    header = lines[0].split()
    assert header[:3] == ["run", "pe", "ext"] and "parent" not in header
    assert any(line.startswith("(hidden at this width: ") and "parent" in line for line in lines)
    # Equal in every run: said once, not a column.
    same = next(line for line in lines if line.startswith("same in every run: "))
    assert "data kjv" in same and "model small" in same and "h 4" in same
    assert "status completed" in same and "status" not in header and "min" not in same
    assert any(line.startswith("(hidden at this width: ") for line in lines)
    # Narrower, names lose their date first (the time of day and the job stay), numbers whole.
    narrow = Console(width=70, record=True)
    print_runs(list_runs(tmp_path), narrow)
    text = narrow.export_text()
    assert "sweeps/00-00-00/pe=alibi,seed=1" in text and "05-00-00_kjv_ft-yarn" in text
    assert "the date in names" in " ".join(text.split()) and "40/40" in text and "18.90" in text
    # Wider, the evaluation shows: methods and the longest length of the current weights.
    wide = Console(width=160, record=True)
    print_runs(list_runs(tmp_path), wide)
    text = wide.export_text()
    assert "3 methods ≤256" in text and "sweeps/2026-01-01_00-00-00/pe=alibi,seed=1" in text
    assert "hidden at this width" not in text


def test_runs_name_a_damaged_evaluation_in_the_table_and_under_it(tmp_path):
    from rich.console import Console

    from posexp.commands.runs import list_runs, print_runs

    torch.manual_seed(0)
    for name in ("a", "b"):
        make_run(tmp_path / name, "rope", 2, 10, 10, {"status": "completed"}, 1)
    (tmp_path / "a" / "eval").mkdir()
    (tmp_path / "a" / "eval" / "extrapolate.json").write_text('{"cut')
    rows = list_runs(tmp_path)
    assert rows[0]["evaluated"] is None and "extrapolate.json" in rows[0]["unreadable"][0]
    console = Console(width=100, record=True)
    print_runs(rows, console)
    lines = console.export_text().splitlines()
    assert "evaluated" in lines[0] and "unreadable" in lines[2]
    assert any(line.startswith("a: ") and "extrapolate.json" in line for line in lines)


def test_a_run_whose_weights_are_gone_is_named_and_the_others_listed(tmp_path):
    from posexp.commands.report.jobs import find_jobs
    from posexp.commands.runs import list_runs

    torch.manual_seed(0)
    for name in ("a", "b"):
        make_run(tmp_path / name, "rope", 2, 10, 10, {"status": "completed"}, 1)
    (tmp_path / "a" / "checkpoint" / "model.safetensors").unlink()  # deleted to save space
    rows = {row["run"]: row for row in list_runs(tmp_path)}
    assert set(rows) == {"a", "b"} and not rows["b"]["unreadable"]
    (problem,) = rows["a"]["unreadable"]  # said once, though both readers found it
    assert problem.endswith("a/checkpoint/model.safetensors is missing")
    jobs = {job.run.path.name: job for job in find_jobs(tmp_path)}  # what a report reads
    assert jobs["a"].evaluation[0] is None and "missing" in jobs["a"].evaluation[1]
    assert jobs["b"].evaluation[1] is None


def test_shorten_middle_keeps_the_start_and_the_end():
    from posexp.commands.runs import shorten_middle

    assert shorten_middle("short", 10) == "short"
    assert shorten_middle("sweeps/2026-01-01_00-00-00/pe=rope,seed=0", 23) == (
        "sweeps/…/pe=rope,seed=0"
    )
    cut = shorten_middle("2026-01-01_00-00-00_kjv_rope_h4", 16)
    assert len(cut) == 16 and cut.startswith("2026-") and cut.endswith("rope_h4")


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


def test_runs_name_a_layered_run_by_its_pattern(tmp_path):
    # The JSON keeps the registered name for scripts; the table shows what reports call it.
    make_run(tmp_path / "irope", "layered", 2, 5, 5, overrides=("pe=irope", "model=small"))
    result = CliRunner().invoke(app, ["runs", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["pe"] == "layered" and row["pe_label"].startswith("rope*3+none")
    table = CliRunner().invoke(app, ["runs", str(tmp_path)], terminal_width=200)
    assert "rope*3+none" in table.output


def test_run_names_with_brackets_print_as_they_are(tmp_path):
    # A sweep over data.files=[a.txt] names its jobs so; rich read that as markup: "[/tmp/...]"
    # raised a MarkupError, "[a.txt]" vanished from the name.
    from rich.console import Console

    from posexp.commands.runs import list_runs, print_runs

    torch.manual_seed(0)
    for name in ("data.files=[/tmp/a.txt]", "data.files=[b.txt]"):
        make_run(tmp_path / "s" / name, "rope", 2, 10, 10, {"status": "completed"}, 1)
    console = Console(width=120, record=True)
    print_runs(list_runs(tmp_path), console)
    text = console.export_text()
    assert "s/data.files=[/tmp/a.txt]" in text and "s/data.files=[b.txt]" in text


def test_an_unfinished_run_is_running_stopped_or_unknown_by_its_lock(tmp_path):
    import platform

    from posexp.commands.report.jobs import find_jobs
    from posexp.commands.runs import live_status
    from posexp.store import runlock

    torch.manual_seed(0)
    for name in ("live", "killed", "elsewhere", "old"):
        make_run(tmp_path / name, "rope", 2, 5, 10)  # a checkpoint, no results: unfinished
    (tmp_path / "killed" / runlock.OWNER).write_text(f"123@{platform.node()}\n")
    (tmp_path / "elsewhere" / runlock.OWNER).write_text("123@another-node\n")
    jobs = {job.run.path.name: job for job in find_jobs(tmp_path)}
    holder = subprocess.Popen(  # another process holds the live run's lock, as training does
        [sys.executable, "-c", "import fcntl,os,sys;fd=os.open(sys.argv[1],os.O_RDWR|os.O_CREAT);"
         "fcntl.flock(fd,fcntl.LOCK_EX);print('locked',flush=True);sys.stdin.read()",
         str(tmp_path / "live" / runlock.OWNER)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        got = {name: live_status(job) for name, job in jobs.items()}
    finally:
        holder.communicate("")
    assert got == {
        "live": "running",
        "killed": "stopped",
        "elsewhere": "unfinished",
        "old": "unfinished",  # no lock file: a run from before locks
    }
