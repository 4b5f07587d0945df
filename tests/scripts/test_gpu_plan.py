"""scripts/gpu/plan.py: the head ablation's plan keeps to its budget, lists every row x seed x
task once with the same steps across a task, packs only what fits in memory; and
`scripts/gpu/check.py --dry-run` prints it without training."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scripts.gpu import plan as gp

ROOT = Path(__file__).resolve().parents[2]
CHECK = [sys.executable, "-m", "scripts.gpu.check"]

HEADS, SEEDS = [1, 4, 16, 32], [0, 1, 2]
ALL_JOBS = {(t, h, s) for t in gp.TASKS for h in HEADS for s in SEEDS}


def measurement(mem_gib=139.8, cores=16, step_s=0.024, gpu_s=0.012, job_gib=4.0, packing=None):
    kinds = tuple(gp.Kind(h, t, step_s, gpu_s, job_gib) for t in gp.TASKS for h in HEADS)
    return gp.Measurement("test GPU", mem_gib, cores, kinds, packing or {1: 1.0, 8: 6.93})


def check_invariants(p, budget):
    """What every plan must hold, whatever it was made from."""
    jobs = [(j.task, j.heads, j.seed) for j in p.jobs]
    assert sorted(jobs) == sorted(ALL_JOBS)  # every row x seed x task, once
    assert p.usable_s <= budget and all(0 <= j.start_s < j.end_s <= p.usable_s for j in p.jobs)
    for task in gp.TASKS:  # one task's rows and seeds train alike: a fair comparison
        assert {j.steps for j in p.jobs if j.task == task} == {p.steps[task]}
        assert p.assumptions.min_steps <= p.steps[task] <= p.assumptions.max_steps
    for wave in range(p.waves):  # what shares the device at once fits in its memory
        here = [j for j in p.jobs if j.wave == wave]
        assert 0 < len(here) <= p.in_flight
        assert sum(j.mem_gib for j in here) <= p.mem_usable_gib + 1e-9
    assert p.mem_usable_gib == pytest.approx(
        p.measurement.mem_gib * (1 - p.assumptions.mem_reserve)
    )


def test_the_simulated_h200_plan_fits_the_nine_minute_call():
    budget = 480 - 60 - 40  # gpu_check's ablation budget, less its prep and its reports
    p = gp.plan(gp.simulated_h200(HEADS), budget, HEADS, SEEDS, gp.Assumptions())
    check_invariants(p, budget)
    assert p.end_s <= budget * (1 - p.assumptions.margin)
    text = gp.render_plan(p)
    assert text.startswith(
        "Head ablation plan: 24 jobs (heads 1, 4, 16, 32 x seeds 0, 1, 2 x lm, mt) on NVIDIA "
        "H200 (SIMULATED measurement)"
    )
    assert text.count("\n| lm |") == text.count("\n| mt |") == 4


def test_the_arithmetic_of_one_plan():
    # 24 jobs of 4 + 1 GiB (lm) and 4 + 1 + 1.5 GiB (mt) need 138 GiB at once: 100 usable, so
    # two waves of 6 + 6. Device-bound: 12 jobs x 12 ms busy / 0.866 efficiency = 0.166 s.
    m = measurement(mem_gib=100 / 0.9)
    a = gp.Assumptions()
    p = gp.plan(m, 500, HEADS, SEEDS, a)
    check_invariants(p, 500)
    assert p.waves == 2 and p.slots == {"lm": 6, "mt": 6}
    assert p.step_s_packed == pytest.approx(12 * 0.012 / (6.93 / 8))
    wave_s = 500 * 0.8 / 2
    assert p.wave_s == pytest.approx(wave_s)
    assert p.steps == {
        "lm": int((wave_s - a.startup_s - a.final_lm_s) / p.step_s_packed),
        "mt": int((wave_s - a.startup_s - a.final_mt_s) / p.step_s_packed),
    }
    assert "1 wave(s) of 24: 138 of 100 GiB" in p.considered[0]
    assert p.considered[0].endswith("does not fit in memory")


def test_packing_is_limited_by_memory():
    wide = gp.plan(measurement(mem_gib=400), 600, HEADS, SEEDS, gp.Assumptions())
    narrow = gp.plan(measurement(mem_gib=60), 600, HEADS, SEEDS, gp.Assumptions())
    assert wide.waves == 1 and wide.in_flight == 24
    assert narrow.in_flight < wide.in_flight and narrow.waves > 1
    assert narrow.wave_mem_gib <= 60 * 0.9
    check_invariants(narrow, 600)
    with pytest.raises(gp.PlanError, match=r"^no plan fits 480 s: .*does not fit in memory"):
        gp.plan(measurement(mem_gib=5), 600, HEADS, SEEDS, gp.Assumptions())  # not even one job


def test_more_time_never_means_fewer_steps_and_steps_stop_at_the_cap():
    a = gp.Assumptions()
    steps = [
        min(gp.plan(measurement(), b, HEADS, SEEDS, a).steps.values()) for b in (400, 800, 1600)
    ]
    assert steps == sorted(steps)
    capped = gp.plan(measurement(), 10**7, HEADS, SEEDS, a)
    assert capped.steps == {"lm": a.max_steps, "mt": a.max_steps}


def test_too_little_time_is_refused_in_one_line():
    with pytest.raises(gp.PlanError) as e:
        gp.plan(measurement(), 150, HEADS, SEEDS, gp.Assumptions())
    assert str(e.value).startswith("no plan fits 120 s: 1 wave(s) of 24") and "\n" not in str(
        e.value
    )
    assert "under 100 steps" in str(e.value)


def test_packed_steps_follow_the_host_or_the_device_whichever_binds():
    a = gp.Assumptions()
    kinds = list(measurement(step_s=0.05, gpu_s=0.001, packing={1: 1.0}).kinds)
    m = measurement(cores=5, packing={1: 1.0})  # 4 cores for jobs, host kept one
    # Host-bound: 8 jobs on 4 cores take twice the slowest step alone.
    assert gp.packed_step(kinds, {"lm": 4, "mt": 4}, m, a) == pytest.approx(0.05 * 2)
    assert gp.packed_step(kinds, {"lm": 2, "mt": 2}, m, a) == pytest.approx(0.05)
    # Device-bound: the busy times add up.
    busy = list(measurement(step_s=0.02, gpu_s=0.015).kinds)
    assert gp.packed_step(busy, {"lm": 3, "mt": 3}, m, a) == pytest.approx(6 * 0.015)


def test_packing_efficiency_interpolates_the_measured_speedups():
    packing = gp.H200_PACKING
    assert gp.efficiency(packing, 1) == 1.0
    assert gp.efficiency(packing, 4) == pytest.approx(3.63 / 4)
    assert gp.efficiency(packing, 6) == pytest.approx((3.63 / 4 + 6.93 / 8) / 2)
    assert gp.efficiency(packing, 24) == pytest.approx(6.93 / 8)  # held past the last one
    assert gp.efficiency({1: 1.0}, 12) == 1.0


@settings(max_examples=60, deadline=None)
@given(
    budget=st.floats(60, 5000),
    mem=st.floats(8, 300),
    cores=st.integers(2, 64),
    step_s=st.floats(0.005, 0.2),
    busy=st.floats(0.0, 1.0),
    job_gib=st.floats(0.5, 20),
)
def test_any_plan_made_keeps_the_invariants(budget, mem, cores, step_s, busy, job_gib):
    m = measurement(mem, cores, step_s, step_s * busy, job_gib)
    try:
        p = gp.plan(m, budget, HEADS, SEEDS, gp.Assumptions())
    except gp.PlanError as e:
        assert "\n" not in str(e) and str(e).startswith("no plan fits")
        return
    check_invariants(p, budget)


def test_a_measurement_round_trips_and_a_bad_one_is_one_line():
    m = gp.simulated_h200(HEADS)
    assert gp.Measurement.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    bad = {**m.to_dict(), "kinds": [{"heads": 1, "task": "lm"}]}
    with pytest.raises(gp.PlanError, match=r"^measurement: TypeError .*step_s, gpu_s, mem_gib$"):
        gp.Measurement.from_dict(bad)
    kind = {"heads": 1, "task": "vision", "step_s": 0.1, "gpu_s": 0.0, "mem_gib": 1.0}
    with pytest.raises(gp.PlanError, match=r"tasks: lm, mt$"):
        gp.Measurement.from_dict({**m.to_dict(), "kinds": [kind]})


def test_assumptions_change_by_key_and_a_bad_key_is_one_line():
    a = gp.Assumptions().with_overrides(["margin=0.3", "min_steps=50"])
    assert a.margin == 0.3 and a.min_steps == 50 and isinstance(a.min_steps, int)
    with pytest.raises(gp.PlanError, match=r"^--assume 'speed=2': no such assumption; allowed: "):
        gp.Assumptions().with_overrides(["speed=2"])
    with pytest.raises(gp.PlanError, match=r"^--assume 'margin=lots': margin must be a number$"):
        gp.Assumptions().with_overrides(["margin=lots"])


# ---- the dry run, through the real script ------------------------------------------------------


def dry_run(tmp_path, *args):
    return subprocess.run(
        [*CHECK, "--dry-run", "--out", str(tmp_path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_dry_run_prints_the_simulated_h200_plan_and_trains_nothing(tmp_path):
    proc = dry_run(tmp_path, "--measured", "simulated")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Head ablation plan: 24 jobs (heads 1, 4, 16, 32 x seeds 0, 1")
    assert "SIMULATED" in proc.stdout and "| task | heads | seeds (wave) | steps |" in proc.stdout
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert {(j["task"], j["heads"], j["seed"]) for j in saved["jobs"]} == ALL_JOBS
    assert saved["end_s"] <= saved["usable_s"] <= saved["budget_s"] <= 480 - 60 - 40
    assert (tmp_path / "plan.md").read_text() == proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "plan.md"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, --dry-run measures it")
def test_dry_run_without_a_gpu_plans_from_the_simulated_h200(tmp_path):
    proc = dry_run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "on NVIDIA H200 (SIMULATED measurement)" in proc.stdout.splitlines()[0]


def test_dry_run_from_a_given_measurement_and_its_errors(tmp_path):
    m = dataclasses.replace(measurement(mem_gib=60), device="given GPU").to_dict()
    path = tmp_path / "m.json"
    path.write_text(json.dumps(m))
    proc = dry_run(tmp_path / "out", "--measured", str(path), "--budget", "600")
    assert proc.returncode == 0, proc.stderr[-2000:]
    saved = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert saved["waves"] > 1 and saved["wave_mem_gib"] <= 60 * 0.9  # memory bound the packing
    assert saved["budget_s"] == pytest.approx(600 - 40, abs=1)
    # Errors: one line each, exit 2, nothing written.
    too_short = dry_run(tmp_path / "x", "--measured", str(path), "--budget", "100")
    missing = dry_run(tmp_path / "x", "--measured", str(tmp_path / "nope.json"))
    bad_key = dry_run(tmp_path / "x", "--measured", "simulated", "--assume", "speed=2")
    for proc in (too_short, missing, bad_key):
        assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr
        assert proc.stderr.count("\n") == 1
    assert too_short.stderr.startswith("error: no plan fits 48 s")
    assert "nope.json': no such file; or --measured simulated" in missing.stderr
    assert not (tmp_path / "x").exists()
    alone = subprocess.run(
        [*CHECK, "--measured", "simulated"], cwd=ROOT, capture_output=True, text=True
    )
    assert alone.returncode == 2 and alone.stderr == "error: --measured is for --dry-run only\n"


def test_smoke_dry_run_measures_toy_steps_on_the_cpu(tmp_path):
    proc = dry_run(tmp_path, "--smoke")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(
        "Head ablation plan: 4 jobs (heads 1, 2 x seeds 0 x lm, mt) on CPU"
    )
    saved = json.loads((tmp_path / "plan.json").read_text())
    kinds = saved["measurement"]["kinds"]
    assert {(k["task"], k["heads"]) for k in kinds} == {(t, h) for t in gp.TASKS for h in (1, 2)}
    assert all(k["step_s"] > 0 and k["gpu_s"] == 0 and k["mem_gib"] > 0 for k in kinds)
    assert saved["steps"] == {"lm": 4, "mt": 4} and not saved["measurement"]["simulated"]
    assert math.isclose(saved["measurement"]["packing"]["1"], 1.0)
