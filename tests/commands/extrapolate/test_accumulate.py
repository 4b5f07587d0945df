"""A researcher's own study: method specs with settings, records that accumulate over calls."""

from __future__ import annotations

import csv
import json
import sys

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from posexp.commands.extrapolate.outputs import tag_label
from posexp.extension.spec import parse_specs
from tests.helpers import TINY, posexp, snapshot

GRID = [f"self_extend(group={g},window={w})" for g in (2, 4, 8) for w in (8, 16)]
LENGTHS = ["--lengths", "32,64,128", "--tokens", "1024"]


@pytest.fixture(scope="module")
def study(tmp_path_factory, cache):
    """Two trained tiny RoPE runs at length 32: fp32 and bf16."""
    cwd = tmp_path_factory.mktemp("study")
    steps = ["train.max_steps=60", "train.eval_interval=60", "train.checkpoint_interval=60"]
    posexp(cwd, cache, "train", "pe=rope", *TINY, *steps, f"hydra.run.dir={cwd / 'fp32'}")
    posexp(
        cwd,
        cache,
        "train",
        "pe=rope",
        *TINY,
        *steps,
        "train.precision=bf16",
        f"hydra.run.dir={cwd / 'bf16'}",
    )
    return cwd


def records(run):
    return json.loads((run / "eval" / "extrapolate.json").read_text())


def evaluate(cwd, cache, run, *args, check=True):
    return posexp(cwd, cache, "eval-extrapolate", "--run", str(run), *LENGTHS, *args, check=check)


def test_a_grid_built_in_two_calls_ends_in_one_table_plot_and_tensorboard(study, cache):
    run = study / "fp32"
    first = evaluate(study, cache, run, "--method", "none", "--method", "yarn")
    assert "fp32: scoring 6 cells" in first.stdout
    second = evaluate(study, cache, run, "--method", ",".join(GRID))
    assert "fp32: scoring 18 cells" in second.stdout  # only its own cells
    labels = ["none", "yarn", *sorted(GRID)]
    recs = records(run)
    assert sorted({r["label"] for r in recs}) == sorted(labels) and len(recs) == 8 * 3
    by = {(r["label"], r["length"]): r for r in recs}
    assert by["self_extend(group=4,window=16)", 128]["settings"] == {
        "window": 16,
        "group": 4,
        "logn": False,
    }
    # Different settings, different numbers: the grid's cells are not one cell relabelled.
    assert len({round(by[m, 128]["ppl"], 9) for m in GRID}) > 1
    rows = list(csv.DictReader((run / "eval" / "extrapolate.csv").open()))
    assert sorted({r["label"] for r in rows}) == sorted(labels) and len(rows) == 24
    # The settings at their effective values, a cell per row (a default's change is visible).
    by_row = {(r["label"], r["length"]): r["settings"] for r in rows}
    assert by_row["self_extend(group=4,window=16)", "128"] == "window=16 group=4 logn=false"
    assert by_row["none", "128"] == ""
    # One line per spec in the figure, one tag per spec in the run's own TensorBoard run.
    events = EventAccumulator(str(run)).Reload()
    for label in labels:
        steps = [
            e.step for e in events.Scalars(f"extrapolate/rope/nonoverlap/ppl/{tag_label(label)}")
        ]
        assert steps == [32, 64, 128]
    assert all(label in second.stdout for label in labels)  # the printed table: the union
    # Asked again, nothing is scored and nothing is written.
    before = snapshot(run / "eval")
    again = evaluate(study, cache, run, "--method", f"none,{GRID[0]}")
    assert "all 6 cells already measured on these weights, scoring none" in again.stdout
    assert snapshot(run / "eval") == before
    # Killed between the swap of eval/ and the TensorBoard write: new records, old events. The
    # next evaluation, with nothing to score, writes the events again (it said "unchanged").
    (run / ".eval_events_of").write_text("the records before")
    for events in run.glob("events.out.tfevents.*.eval-extrapolate"):
        events.unlink()
    evaluate(study, cache, run, "--method", "none")
    events = EventAccumulator(str(run)).Reload()
    assert [e.step for e in events.Scalars("extrapolate/rope/nonoverlap/ppl/none")] == [32, 64, 128]
    assert sorted(r["method"] for r in records(run)) == sorted(r["method"] for r in recs)


def test_two_specs_of_one_cell_score_it_once_and_keep_it_under_both(study, cache):
    run, at = study / "fp32", ["--lengths", "48", "--tokens", "1024"]
    posexp(
        study, cache, "eval-extrapolate", "--run", str(run), "--method", "self_extend(group=2)", *at
    )
    (first,) = [r for r in records(run) if r["length"] == 48]
    assert first["settings"] == {"window": 8, "group": 2, "logn": False}  # null window: L0 / 4
    spelled = "self_extend(group=2,window=8)"
    out = posexp(study, cache, "eval-extrapolate", "--run", str(run), "--method", spelled, *at)
    assert (
        "all 1 cells already measured on these weights (1 the same cell as another " in out.stdout
    )
    at_48 = {r["label"]: r for r in records(run) if r["length"] == 48}
    assert set(at_48) == {"self_extend(group=2)", spelled}
    assert (
        at_48[spelled]["ppl"] == first["ppl"] and at_48[spelled]["scored_at"] == first["scored_at"]
    )


def test_force_rescores_just_the_cells_asked_for(study, cache):
    run = study / "fp32"
    before = {(r["label"], r["length"]): r["scored_at"] for r in records(run)}
    out = evaluate(study, cache, run, "--method", "yarn", "--lengths", "64", "--force")
    assert "rescoring 1 cell (--force)" in out.stdout
    after = {(r["label"], r["length"]): r["scored_at"] for r in records(run)}
    assert set(after) == set(before)
    changed = [k for k in before if after[k] != before[k]]
    assert changed in ([], [("yarn", 64)])  # within the same second the stamp may not move
    assert all(after[k] == before[k] for k in before if k != ("yarn", 64))


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-6), ("bf16", 1e-3)])
def test_self_extend_with_group_one_is_plain_rope(study, cache, precision, tolerance):
    run = study / precision
    evaluate(
        study,
        cache,
        run,
        "--method",
        "none,self_extend(group=1)",
        "--lengths",
        "32,64,128,256",
        "--tokens",
        "1024",
    )
    by = {(r["label"], r["length"]): r for r in records(run) if r["sample_size"] == 1024}
    for n in (32, 64, 128, 256):
        plain, grouped = by["none", n], by["self_extend(group=1)", n]
        assert plain["precision"] == grouped["precision"] == precision
        assert grouped["ppl"] == pytest.approx(plain["ppl"], rel=tolerance), n


BAD_SPECS = {
    "unknown method": ("selfextend(group=4)", "unknown method 'selfextend'"),
    "unknown setting": ("self_extend(grup=4)", "self_extend has no setting 'grup'"),
    "group zero": ("self_extend(group=0)", "group must be a positive integer or null, got 0"),
    "negative window": (
        "self_extend(window=-1)",
        "window must be a positive integer or null, got -1",
    ),
    "not a number": ("yarn(beta_fast=abc)", "beta_fast must be a finite number > 0, got 'abc'"),
    "unbalanced": ("self_extend(group=4,window=16", "unbalanced parentheses"),
    "method without settings": ("none(window=4)", "none takes no settings, got 'window'"),
    "window past the training length": (
        "self_extend(window=40)",
        "window must be in [1, 31] (below the training length 32), got 40",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_SPECS))
def test_a_bad_spec_is_one_line_exit_2_and_touches_no_record(
    study, cache, name, monkeypatch, capsys
):
    from posexp.cli import main

    spec, message = BAD_SPECS[name]
    run = study / "fp32"
    evaluate(study, cache, run, "--method", "none")  # records to keep
    before = snapshot(run / "eval")
    monkeypatch.chdir(study)
    monkeypatch.setattr(
        sys, "argv", ["posexp", "eval-extrapolate", "--run", str(run), "--method", f"none,{spec}"]
    )
    with pytest.raises(SystemExit) as exit_info:
        main()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2
    assert len(lines) == 1 and lines[0].startswith("error: --method ") and message in lines[0]
    assert snapshot(run / "eval") == before


def test_records_of_earlier_weights_are_kept_apart_and_never_shown(study, cache):
    run = study / "bf16"
    evaluate(study, cache, run, "--method", "none,pi")
    old = records(run)
    posexp(study, cache, "train", f"resume={run}", "train.max_steps=70")  # the weights move on
    out = evaluate(study, cache, run, "--method", "none")
    assert "scoring 3 cells" in out.stdout  # none of the old cells counts as measured
    moved = f"; {len(old)} records of earlier weights (the run trained on) move to eval/stale.json"
    assert moved in out.stdout
    current = records(run)
    assert {r["label"] for r in current} == {"none"}
    assert {r["checkpoint"]["step"] for r in current} == {70}
    stale = json.loads((run / "eval" / "stale.json").read_text())
    assert {(r["label"], r["length"]) for r in stale} >= {(r["label"], r["length"]) for r in old}
    assert all(r["checkpoint"]["step"] == 60 for r in stale)
    rows = list(csv.DictReader((run / "eval" / "extrapolate.csv").open()))
    assert {r["label"] for r in rows} == {"none"}  # the CSV holds these weights only


def test_two_evaluations_planned_together_keep_each_others_cells(study):
    # Both read the stored records before either merged: the second re-reads them under the
    # eval lock, so the first one's cells survive.
    from posexp.commands.extrapolate.parallel import Progress
    from posexp.commands.extrapolate.plan import Settings, attach_work, plan_run
    from posexp.commands.extrapolate.score_run import evaluate_plan, load_test_tokens
    from posexp.config import ExtrapolateConfig
    from posexp.store.rundir import RunDir

    run = RunDir(study / "fp32")
    plans = []
    for method in ("logn", "rerope"):
        knobs = ExtrapolateConfig(lengths=[32, 48], tokens=512, method=parse_specs(method))
        plan = plan_run(run, Settings(knobs, device="cpu"), n_runs=1)
        test = load_test_tokens(plan.cfg, {})
        attach_work(plan, len(test))
        plans.append((plan, test))
    for plan, test in plans:
        bar = Progress(sum(i.size for i in plan.todo), len(plan.todo), show=False)
        evaluate_plan(plan, test, torch.device("cpu"), 4096, bar)
    cells = {(r["label"], r["length"]) for r in records(study / "fp32") if r["sample_size"] == 512}
    assert cells == {(m, n) for m in ("logn", "rerope") for n in (32, 48)}


def test_a_stop_part_way_keeps_the_cells_already_scored(
    study, cache, tmp_path, monkeypatch, capsys
):
    # SIGTERM (a Slurm time limit) or Ctrl-C while pi is loaded: none's two cells are kept.
    import shutil

    from posexp.cli import main
    from posexp.runtime import weights
    from posexp.runtime.stops import Terminated

    run = tmp_path / "run"
    shutil.copytree(study / "fp32", run, ignore=shutil.ignore_patterns("eval"))
    real, loads = weights.load_model, []

    def load_then_stop(run, *args, **kwargs):
        loads.append(args)
        if len(loads) == 2:
            raise Terminated
        return real(run, *args, **kwargs)

    monkeypatch.setattr(weights, "load_model", load_then_stop)
    monkeypatch.chdir(study)
    argv = ["posexp", "eval-extrapolate", "--run", str(run), "--method", "none,pi"]
    monkeypatch.setattr(sys, "argv", [*argv, "--lengths", "32,64", "--workers", "1"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 143 and "stopped (SIGTERM)" in err
    assert (
        "kept the 2 cell(s) scored before the stop; rerun the command to score the other 2" in err
    )
    assert [(r["label"], r["length"]) for r in records(run)] == [("none", 32), ("none", 64)]
