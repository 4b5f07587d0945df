"""Scoring a sweep's runs in worker processes: the same records as one after another."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from posexp.commands.extrapolate import parallel
from posexp.commands.extrapolate.evaluate import evaluate_runs
from posexp.commands.extrapolate.plan import Settings
from posexp.config import ExtrapolateConfig
from tests.helpers import TINY, posexp


def test_workers_for_several_runs_on_the_cpu_one_thread_per_core(monkeypatch):
    monkeypatch.setattr(parallel, "usable_cores", lambda: 8)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert parallel.worker_plan(Settings(), cpu, runs=3, tasks=12) == (8, 1)
    assert parallel.worker_plan(Settings(), cpu, runs=2, tasks=3) == (3, 2)  # 3 x 2 <= 8 cores
    assert parallel.worker_plan(Settings(workers=2), cpu, runs=5, tasks=9) == (2, 4)
    assert parallel.worker_plan(Settings(workers=2, threads=1), cpu, 5, 9) == (2, 1)
    # One run scores here unless workers are asked for; a GPU scores here; so does one task.
    assert parallel.worker_plan(Settings(threads=3), cpu, runs=1, tasks=9) == (1, 3)
    assert parallel.worker_plan(Settings(workers=4), cpu, runs=1, tasks=9) == (4, 2)
    assert parallel.worker_plan(Settings(threads=3), cuda, runs=4, tasks=9)[0] == 1
    assert parallel.worker_plan(Settings(threads=3), cpu, runs=4, tasks=1)[0] == 1


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, cache):
    cwd = tmp_path_factory.mktemp("parallel")
    posexp(cwd, cache, "train", "-m", "pe=rope,alibi", *TINY, "hydra.sweep.dir=sweep")
    return cwd / "sweep"


def test_workers_give_the_records_one_process_gives(two_runs, tmp_path):
    apart = tmp_path / "apart"
    shutil.copytree(two_runs, apart)
    knobs = ExtrapolateConfig(lengths=[32, 64], tokens=256, method=["none", "pi", "logn"])
    evaluate_runs(two_runs, Settings(knobs, device="cpu", workers=1, threads=1), progress=False)
    evaluate_runs(apart, Settings(knobs, device="cpu", workers=2, threads=1), progress=False)
    for job in ("pe=rope", "pe=alibi"):
        here = json.loads((two_runs / job / "eval" / "extrapolate.json").read_text())
        there = json.loads((apart / job / "eval" / "extrapolate.json").read_text())
        assert [(r["method"], r["length"]) for r in there] == [
            (r["method"], r["length"]) for r in here
        ]
        for a, b in zip(here, there, strict=True):
            assert b["ppl"] == pytest.approx(a["ppl"], rel=1e-6)
    methods = {
        r["method"] for r in json.loads((apart / "pe=alibi/eval/extrapolate.json").read_text())
    }
    assert methods == {"none", "logn"}  # pi does not apply to ALiBi


def test_largest_tasks_go_first():
    class Item:
        def __init__(self, method, size):
            self.record, self.size = type("R", (), {"method": method})(), size

    plan = type("P", (), {"todo": [Item("a", 1), Item("b", 5), Item("a", 2)]})()
    assert [(label, size) for _, label, size in parallel.method_tasks([plan])] == [
        ("b", 5),
        ("a", 3),
    ]
