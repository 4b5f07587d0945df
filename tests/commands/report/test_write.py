"""`posexp report`: the generic sweep table, the view registry and the extrapolation view."""

from __future__ import annotations

import csv
import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from posexp.cli.app import app
from posexp.commands.report import view as view_mod
from posexp.commands.report.jobs import find_jobs, swept_keys
from posexp.commands.report.view import register_report_view
from posexp.commands.report.write import write_report
from posexp.registry import Registry
from tests.helpers import TINY, posexp, posexp_in_own_group

NO_HEADS = [a for a in TINY if not a.startswith("heads=")]


def sweep_dir(cwd):
    (sweep,) = (cwd / "outputs" / "sweeps").iterdir()
    return sweep


@pytest.fixture(scope="module")
def free_sweep(tmp_path_factory, cache):
    """`-m pe=rope,alibi heads=2,3`: heads=3 fails (64 is not divisible by 3), plus an unfinished job."""
    cwd = tmp_path_factory.mktemp("free")
    with pytest.MonkeyPatch.context() as env:  # a grid with jobs known to fail: run the rest
        env.setenv("POSEXP_SWEEP_CHECK", "0")
        proc = posexp(
            cwd, cache, "train", "-m", "pe=rope,alibi", "heads=2,3", *NO_HEADS, check=False
        )
    assert proc.returncode == 2  # the failed jobs make the sweep fail, after every job ran
    sweep = sweep_dir(cwd)
    # A job that never finished (killed before its first checkpoint): only Hydra's files.
    done = job_dir(sweep, "pe=rope", "heads=2")
    overrides = (done / ".hydra" / "overrides.yaml").read_text().replace("pe=rope", "pe=none")
    unfinished = sweep / done.name.replace("pe=rope", "pe=none")
    (unfinished / ".hydra").mkdir(parents=True)
    (unfinished / ".hydra" / "overrides.yaml").write_text(overrides)
    return cwd, sweep


def job_dir(sweep, *parts):
    (job,) = [d for d in sweep.iterdir() if all(p in d.name.split(",") for p in parts)]
    return job


def test_free_form_sweep_report(free_sweep, cache):
    cwd, sweep = free_sweep
    proc = posexp(cwd, cache, "report", str(sweep))
    assert "report.md" in proc.stdout
    md = (sweep / "report.md").read_text()
    assert "5 runs: 2 completed, 2 failed, 1 unfinished." in md
    assert "| pe | heads | status |" in md  # keyed by the swept parameters only
    assert "Length extrapolation" not in md  # no view applies
    rows = list(csv.DictReader((sweep / "report.csv").open()))
    assert [(r["pe"], r["heads"], r["status"]) for r in rows] == [
        ("alibi", "2", "completed"),
        ("alibi", "3", "failed"),
        ("none", "2", "unfinished"),
        ("rope", "2", "completed"),
        ("rope", "3", "failed"),
    ]
    assert all(
        "heads=3 does not divide d_model=64" in r["error"] for r in rows if r["status"] == "failed"
    )
    assert "no results.json and no checkpoint" in rows[2]["error"]
    done = [r for r in rows if r["status"] == "completed"]
    assert all(float(r["final/val_loss"]) > 0 and r["final/params"] for r in done)
    assert (sweep / "report_runs.png").read_bytes()[:4] == b"\x89PNG"


def test_report_of_a_single_run_and_a_custom_view(free_sweep, monkeypatch, capsys):
    cwd, sweep = free_sweep
    job = job_dir(sweep, "pe=rope", "heads=2")
    jobs = find_jobs(job)
    assert [j.path for j in jobs] == [job] and jobs[0].status == "completed"
    assert swept_keys(jobs) == []  # nothing varies in one run: its settings are no columns

    monkeypatch.setattr(view_mod, "REPORT_VIEWS", Registry("report view"))
    seen = []

    def render(ctx):
        seen.append([ctx.label(j) for j in ctx.jobs])
        path = ctx.write_csv("report_custom.csv", [{"a": 1}])
        return f"## Custom\n\nwrote {path.name}"

    register_report_view(
        "custom", lambda js: all(j.pe in ("rope", "alibi", "none") for j in js), render
    )
    with pytest.raises(ValueError, match="registered twice"):
        register_report_view("custom", lambda js: True, render)
    files = write_report(sweep, evaluate=False)
    assert sweep / "report_custom.csv" in files
    assert "## Custom\n\nwrote report_custom.csv" in (sweep / "report.md").read_text()
    assert sorted(seen[0]) == [
        "alibi h2",
        "alibi h3",
        "none h2",
        "rope h2",
        "rope h3",
    ]


def test_report_errors(tmp_path, monkeypatch, capsys):
    from posexp.errors import PosexpError

    with pytest.raises(PosexpError, match="no such directory"):
        write_report(tmp_path / "nope")
    with pytest.raises(PosexpError, match="no runs in"):
        write_report(tmp_path)
    with pytest.raises(
        PosexpError, match=r"^unknown --device 'tpu'; allowed: auto, cpu, cuda, mps$"
    ):
        write_report(tmp_path, device="tpu")  # refused even when nothing needs evaluating


def test_extrapolation_preset_then_report(tmp_path, cache):
    # The preset's sweep, shrunk to three PEs and tiny runs; `report` runs the evaluation the
    # preset asks for (its `extrapolate:` section), then writes the ALiBi-style table.
    posexp(
        tmp_path,
        cache,
        "train",
        "-m",
        "experiment=extrapolation",
        "pe=learned,rope,alibi",
        "seed=0",  # the preset sweeps 3 seeds; one keeps this test short
        *TINY,
        "train.max_steps=4",
        "extrapolate.len=64",
        "extrapolate.tokens=256",
        "extrapolate.stride=16",
        "extrapolate.protocol=both",
    )
    sweep = sweep_dir(tmp_path)
    proc = posexp(tmp_path, cache, "report", str(sweep))
    assert "evaluating 3 run(s)" in proc.stdout
    md = (sweep / "report.md").read_text()
    assert "## Length extrapolation" in md
    assert "Cells: one seed per column (no spread: sweep `seed=0,1,2` for mean ± std)." in md
    # Rows carry the labels the PEs declare (posexp/pe), in their declared order; lengths
    # with their multiple of L_train are the columns.
    # The preset's methods (none, pi, ntk, yarn, llama3), each where it applies.
    labels = [
        "learned (APE)",
        "learned (APE)+pi",
        "RoPE",
        "RoPE+pi",
        "RoPE+ntk",
        "RoPE+yarn",
        "RoPE+llama3",
        "ALiBi",
    ]
    lines = md.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("| PE + method | 32 (1×) |")]
    assert len(heads) == 4  # ppl and ratio tables, for nonoverlap and sliding
    for i in heads:
        assert [line.split(" | ")[0][2:] for line in lines[i + 2 : i + 2 + len(labels)]] == labels
    assert "### nonoverlap: non-overlapping windows; 256 scored tokens per length" in md
    assert "### sliding: sliding window, stride 16" in md
    assert (
        any(line.startswith("| learned (APE) |") and "n/a [1]" in line for line in lines)
        and "[1] not applicable: the learned position table" in md
    )
    assert "Press et al. 2022" in md and "| 15512 | 30.3 | 406.01 (20.25×)" in md
    rows = list(csv.DictReader((sweep / "report_extrapolation.csv").open()))
    assert [(r["protocol"], r["length"]) for r in rows] == [
        ("nonoverlap", "32"),
        ("nonoverlap", "64"),
        ("sliding", "32"),
        ("sliding", "64"),
    ]
    assert rows[1]["learned"] == "" and float(rows[1]["alibi"]) > 1 and rows[1]["alibi n"] == "1"
    for p in ("nonoverlap", "sliding"):
        assert (sweep / f"report_extrapolation_{p}.png").read_bytes()[:4] == b"\x89PNG"
    # The results table, one value a row, as the runs' records hold them; LaTeX beside report.md
    import json

    import pandas as pd

    stored = [
        r
        for job in find_jobs(sweep)
        for r in json.loads((job.path / "eval" / "extrapolate.json").read_text())
    ]
    long = pd.read_csv(sweep / "report_results.csv")
    scored = [r for r in stored if r.get("ppl") is not None]
    assert len(long[long["primary"]]) == len(scored) and set(long["pe"]) == {
        "rope",
        "alibi",
        "learned",
    }
    assert len(pd.read_parquet(sweep / "report_results.parquet")) == len(long)
    tex = (sweep / "report.tex").read_text()
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0]
    assert r"\begin{tabular}" in tex and r"$\pm$" not in body  # one seed: means alone
    assert "RoPE + pi" in tex
    # A second report finds every cell its preset asks for measured: it would score none.
    from posexp.commands.extrapolate.plan import Settings, plan_run

    jobs = [j for j in find_jobs(sweep) if j.run.has_checkpoint()]
    assert jobs and all(plan_run(j.run, Settings(device="cpu"), len(jobs)).todo == [] for j in jobs)


def test_one_damaged_job_stops_neither_the_sweeps_evaluation_nor_its_report(free_sweep, tmp_path):
    from rich.console import Console

    from posexp.commands.extrapolate.evaluate import PartlyEvaluated, evaluate_runs
    from posexp.commands.extrapolate.plan import Settings
    from posexp.config import ExtrapolateConfig

    _, sweep = free_sweep
    copy = tmp_path / sweep.name
    shutil.copytree(sweep, copy)
    damaged = job_dir(copy, "pe=alibi", "heads=2")
    (damaged / "checkpoint" / "model.safetensors").write_bytes(b"not weights")
    console = Console(record=True, width=400)
    knobs = ExtrapolateConfig.from_dict(
        {"lengths": "32,64", "method": "none", "tokens": 256}, prefix="--"
    )
    with pytest.raises(PartlyEvaluated, match=r"^evaluated 1 run\(s\); skipped 4 "):
        evaluate_runs(copy, Settings(knobs, device="cpu"), console=console, progress=False)
    said = console.export_text()
    assert f"{damaged}: skipped: corrupt checkpoint" in said
    assert said.count("no checkpoint to evaluate (status failed)") == 2
    assert "no checkpoint to evaluate (status unfinished)" in said
    assert (job_dir(copy, "pe=rope", "heads=2") / "eval" / "extrapolate.json").is_file()

    (copy / "report.md").write_text("stale")
    write_report(copy, evaluate=False, console=console)
    assert "5 runs: 2 completed, 2 failed, 1 unfinished." in (copy / "report.md").read_text()


def test_a_report_with_methods_scores_runs_without_a_preset_and_says_how(
    free_sweep, tmp_path, cache
):
    # A plain sweep has no `extrapolate:` section: --method still scores its completed jobs,
    # at eval-extrapolate's default lengths (doubling from 32 up to 4096).
    cwd, sweep = free_sweep
    copy = tmp_path / sweep.name
    shutil.copytree(sweep, copy)
    proc = posexp(cwd, cache, "report", str(copy), "--method", "none", "--workers", "1")
    assert (
        "evaluating 2 run(s) at longer lengths first: the cells of --method none, at the "
        "lengths their preset (`extrapolate:` section) asks for, else at eval-extrapolate's "
        "defaults (lengths doubling from the training length to 4096) that are not yet measured"
    ) in " ".join(proc.stdout.split())
    assert "preset asks for that" not in proc.stdout
    records = job_dir(copy, "pe=rope", "heads=2") / "eval" / "extrapolate.json"
    assert sorted(r["length"] for r in json.loads(records.read_text())) == [
        32 * 2**i for i in range(8)
    ]
    out = CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "400"}).output
    help_text = re.sub(r"[│\s]+", " ", out)
    assert "with --method, those methods for every completed job" in help_text
    assert "also scores jobs without a preset" in help_text


# SIGTERM (a Slurm time limit) to the report as the first cell it scores is done.
SIGTERM_AT_THE_FIRST_CELL = """
import os, signal, sys
from posexp.cli.app import main
from posexp.commands.extrapolate import parallel

def stop(bar, real=parallel.Progress.cell_done):
    real(bar)
    if bar.done == 1:
        os.kill(os.getpid(), signal.SIGTERM)

parallel.Progress.cell_done = stop
sys.argv = ["posexp", "report", *sys.argv[1:]]
main()
"""


def test_sigterm_stops_a_report_keeping_the_cells_it_scored(free_sweep, tmp_path, cache):
    # The report died of the signal (exit -15), its cells lost, nothing said; it now stops
    # as eval-extrapolate does.
    cwd, sweep = free_sweep
    copy = tmp_path / sweep.name
    shutil.copytree(sweep, copy)
    args = [str(copy), "--method", "none", "--workers", "1"]
    proc = posexp_in_own_group(cwd, cache, SIGTERM_AT_THE_FIRST_CELL, *args)
    assert proc.returncode == 143, proc.stderr
    assert "Traceback" not in proc.stderr
    kept = [line for line in proc.stderr.splitlines() if "cell(s) scored before the stop" in line]
    assert [line.split(": ", 1)[1] for line in kept] == [
        "kept the 1 cell(s) scored before the stop; rerun the command to score the other 7"
    ]
    (run,) = [job for job in copy.iterdir() if kept[0].startswith(f"{job}:")]
    assert len(json.loads((run / "eval" / "extrapolate.json").read_text())) == 1
    assert proc.stderr.splitlines()[-1] == "stopped (SIGTERM)"
