"""Sweeps through Hydra's launchers: placement rules, parallel joblib jobs, submitit, failures, reruns."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from posexp.config import from_composed
from posexp.config.paths import config_dir
from posexp.config.resolvers import register_resolvers
from posexp.errors import PosexpError
from posexp.runtime import hardware, placement
from posexp.runtime.device import resolve_device
from posexp.runtime.sweeps import check_same_job
from tests.helpers import TINY, lock_held_elsewhere, posexp, snapshot

JOBLIB = {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"}
LOCAL = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"}
SLURM = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"}
BASIC = {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}

# 4 steps are enough to finish a job; the sweep tests are about launching, not training.
SHORT = [*TINY, "train.max_steps=4", "train.eval_interval=4", "train.checkpoint_interval=4"]


def jobs(sweep: Path) -> dict[str, Path]:
    """Job dirs of a sweep, keyed by their overrides (Hydra's override_dirname)."""
    return {p.name: p for p in sweep.iterdir() if (p / ".hydra").is_dir()}


def job_with(sweep: Path, override: str) -> Path:
    (match,) = [p for name, p in jobs(sweep).items() if override in name.split(",")]
    return match


def results(job: Path) -> dict:
    return json.loads((job / "results.json").read_text())


def span(job: Path) -> tuple[float, float]:
    """When the job ran: Hydra writes .hydra/hydra.yaml as it starts, the task results.json last."""
    return (job / ".hydra" / "hydra.yaml").stat().st_mtime, (job / "results.json").stat().st_mtime


# ---- placement rules (fake GPU and core counts) -----------------------------------------------


def plan(**kw):
    args = {"multirun": True, "job_num": 0, "launcher": JOBLIB, "n_gpus": 0, "cores": 16}
    return placement.plan(**{**args, **kw})


def test_joblib_jobs_go_round_robin_over_gpus_with_a_share_of_the_cores():
    launcher = {**JOBLIB, "n_jobs": 8}
    got = [plan(job_num=k, launcher=launcher, n_gpus=4, jobs_per_gpu=2) for k in range(10)]
    assert [p.gpu for p in got] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert {p.threads for p in got} == {2} and all(p.note is None for p in got)


def test_more_jobs_than_gpu_slots_is_reported():
    p = plan(job_num=5, launcher={**JOBLIB, "n_jobs": 12}, n_gpus=4, jobs_per_gpu=2)
    assert p.gpu == 1 and "share a GPU" in p.note


def test_cpu_sweep_threads_follow_n_jobs_joblib_style():
    assert plan(launcher={**JOBLIB, "n_jobs": 4}).threads == 4
    assert plan(launcher={**JOBLIB, "n_jobs": -1}).threads == 1  # all cores busy: 1 each
    assert plan(launcher={**JOBLIB, "n_jobs": -2}, cores=9).threads == 1
    assert plan(launcher={**JOBLIB, "n_jobs": 3}).gpu is None
    assert plan(launcher={**JOBLIB, "n_jobs": 4}, threads=3).threads == 3  # explicit wins


def test_other_launchers_and_single_runs():
    assert plan(launcher=BASIC, n_gpus=4, job_num=3) == placement.Placement(None, None)
    assert plan(multirun=False, n_gpus=4, threads=2) == placement.Placement(None, 2)
    local = plan(launcher={**LOCAL, "cpus_per_task": None}, n_gpus=2, job_num=3)
    assert (local.gpu, local.threads) == (1, 1)
    slurm = plan(launcher={**SLURM, "cpus_per_task": 8}, n_gpus=1, job_num=7)
    assert (slurm.gpu, slurm.threads) == (0, 8)
    assert plan(multirun=False, local_world_size=4, cores=16).threads == 4  # torchrun


def test_joblib_default_n_jobs(monkeypatch):
    assert hardware.default_n_jobs(2, n_gpus=4) == 8
    assert hardware.default_n_jobs(2, n_gpus=0, cores=6) == 6
    monkeypatch.setattr(hardware, "gpu_count", lambda: 3)
    register_resolvers()
    cfg = OmegaConf.create({"placement": {"jobs_per_gpu": 2}, "n": "${posexp_n_jobs:}"})
    assert cfg.n == 6
    assert OmegaConf.create({"n": "${posexp_n_jobs:}"}).n == 3  # no placement key: 1 per GPU


def test_auto_device_is_the_assigned_gpu(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert resolve_device("auto", gpu=3) == torch.device("cuda", 3) and chosen == [3]
    assert resolve_device("cpu", gpu=3) == torch.device("cpu")


# ---- launchers end to end ----------------------------------------------------------------------


def test_joblib_runs_jobs_in_parallel_and_isolates_a_failure(tmp_path, cache, capfd, monkeypatch):
    sweep = tmp_path / "sweep"
    # dropout 2.0 fails its job (a one-line config error); the other two run, in parallel.
    monkeypatch.setenv("POSEXP_SWEEP_CHECK", "0")  # not refused up front: each job on its own
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        proc = posexp(
            tmp_path,
            cache,
            "train",
            "-m",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={sweep}",
            "model.dropout=0.0,0.1,2.0",
            *SHORT,
            check=False,
        )
    assert proc.returncode != 0
    # configs/hydra/launcher/joblib.yaml completes the plugin's schema on purpose: Hydra's
    # deprecation notice about that is not shown to the user.
    assert not [w for w in caught if "ConfigStore schema" in str(w.message)]
    assert "ConfigStore schema" not in capfd.readouterr().err  # nor from the worker processes
    ok = [job_with(sweep, f"model.dropout={d}") for d in ("0.0", "0.1")]
    assert [results(j)["status"] for j in ok] == ["completed", "completed"]
    (a0, a1), (b0, b1) = span(ok[0]), span(ok[1])
    assert a0 < b1 and b0 < a1, "the two jobs did not overlap in time"
    assert all("placement: cpu, 1 CPU thread\n" in (j / "train.log").read_text() for j in ok)
    # Job dirs are named after the swept key alone; the fixed overrides stay in overrides.yaml.
    assert [j.name for j in ok] == ["model.dropout=0.0", "model.dropout=0.1"]
    assert "model=tiny" in (ok[0] / ".hydra" / "overrides.yaml").read_text()
    bad = results(job_with(sweep, "model.dropout=2.0"))
    assert bad == {
        "status": "failed",
        "error": "model.dropout must be a finite number in [0, 1), got 2.0",
    }


def test_submitit_local_sweep_end_to_end(tmp_path, cache):
    sweep = tmp_path / "sweep"
    posexp(
        tmp_path,
        cache,
        "train",
        "-m",
        "hydra/launcher=submitit_local",
        f"hydra.sweep.dir={sweep}",
        "heads=2,4",
        *[a for a in SHORT if not a.startswith("heads=")],
    )
    found = jobs(sweep)
    assert sorted(found) == ["heads=2", "heads=4"]
    assert all(results(j)["status"] == "completed" for j in found.values())
    assert (sweep / ".submitit").is_dir()


def test_launcher_presets_compose(tmp_path, cache):
    proc = posexp(
        tmp_path,
        cache,
        "train",
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.partition=gpu",
        "--cfg",
        "hydra",
    )
    launcher = yaml.safe_load(proc.stdout)["hydra"]["launcher"]
    assert launcher["_target_"].endswith("SlurmLauncher") and launcher["partition"] == "gpu"
    assert launcher["gpus_per_node"] == 1 and launcher["timeout_min"] == 240
    assert launcher["name"] == "posexp_${hydra.job.name}"
    assert "validated against ConfigStore schema" not in proc.stderr

    # The local presets, composed in-process (as the launchers see them, resolved).
    with (
        initialize_config_dir(config_dir=config_dir(), version_base="1.3"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter(
            "ignore", UserWarning
        )  # Hydra's schema matching of same-named presets
        joblib = compose(
            "train", ["hydra/launcher=joblib", "placement.jobs_per_gpu=3"], return_hydra_config=True
        ).hydra.launcher
        local = compose(
            "train", ["hydra/launcher=submitit_local"], return_hydra_config=True
        ).hydra.launcher
    assert joblib.prefer == "processes" and str(joblib.batch_size) == "1"
    assert joblib.n_jobs == hardware.default_n_jobs(3)
    assert local.gpus_per_node == hardware.gpu_count() and local.cpus_per_task == 1


def ends_on_its_summary(proc, sweep) -> None:
    """The heads=2,3,4 sweep ends on its summary, the failed job with its error, then one line
    and exit 2: not on Hydra's "Error executing job" and the first failure alone."""
    assert proc.returncode == 2 and "Error executing job" not in proc.stderr
    assert re.search(r"^  heads=3: failed: .*does not divide d_model=64", proc.stderr, re.M)
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith(
        "error: 1 of 3 sweep jobs failed (listed above); the others ran; fix them, then rerun "
        f"the same command with hydra.sweep.dir={sweep}"
    )


def test_failed_job_is_recorded_and_a_rerun_skips_finished_jobs(tmp_path, cache, monkeypatch):
    sweep = tmp_path / "sweep"
    monkeypatch.setenv("POSEXP_SWEEP_CHECK", "0")  # not refused up front: each job on its own
    args = [
        "train",
        "-m",
        f"hydra.sweep.dir={sweep}",
        "heads=2,3,4",
        *[a for a in SHORT if not a.startswith("heads=")],
    ]
    proc = posexp(tmp_path, cache, *args, check=False)  # basic launcher: one job after another
    ends_on_its_summary(proc, sweep)
    done, unfinished = job_with(sweep, "heads=2"), job_with(sweep, "heads=4")
    assert results(done)["status"] == results(unfinished)["status"] == "completed"
    failed = results(job_with(sweep, "heads=3"))
    assert (
        failed == {"status": "failed", "error": failed["error"]} and "d_model=64" in failed["error"]
    )

    from posexp.commands.report.write import write_report

    write_report(sweep, evaluate=False)
    report = (sweep / "report.md").read_text()
    assert "failed" in report and "does not divide d_model=64" in report

    # Rerun the same command with the same sweep dir: heads=2 is skipped, heads=3 fails again,
    # heads=4 (as if killed after its last checkpoint) resumes from it.
    final = results(unfinished)
    (unfinished / "results.json").unlink()
    stamps = {
        p: p.stat().st_mtime_ns for j in (done, unfinished) for p in (j / "checkpoint").iterdir()
    }
    events = sorted(done.glob("events.out.tfevents.*"))
    proc = posexp(tmp_path, cache, *args, check=False)
    ends_on_its_summary(proc, sweep)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing retrained
    assert sorted(done.glob("events.out.tfevents.*")) == events
    assert "already completed (results.json): skipped" in (done / "train.log").read_text()
    assert "has a checkpoint and no results: resuming it" in (unfinished / "train.log").read_text()
    assert results(unfinished) == final  # same step, same final metrics
    assert results(done)["status"] == "completed"

    # A job dir is not reused for other settings (e.g. another experiment=, which the dir name
    # leaves out); runtime settings may change.
    saved = OmegaConf.load(done / ".hydra" / "config.yaml")
    check_same_job(from_composed(saved), done)
    saved.train.threads, saved.device = 1, "cuda"
    check_same_job(from_composed(saved), done)
    saved.train.lr = 1.0
    with pytest.raises(PosexpError, match=r"other settings \(train.lr="):
        check_same_job(from_composed(saved), done)


def test_a_rerun_refuses_only_the_job_another_process_is_writing(tmp_path, cache):
    sweep = tmp_path / "sweep"
    args = [
        "train",
        "-m",
        f"hydra.sweep.dir={sweep}",
        "hydra.sweep.subdir=${hydra.job.num}",
        "seed=0,1",
        *SHORT,
    ]
    for job in ("0", "1"):  # two jobs that finished (a rerun skips them) ...
        (sweep / job).mkdir(parents=True)
        (sweep / job / "results.json").write_text(json.dumps({"status": "completed", "step": 4}))
        (sweep / job / "train.log").write_text("the job's own log\n")
    with lock_held_elsewhere(sweep / "0") as other:  # ... one of them still written by its process
        busy = snapshot(sweep / "0")
        proc = posexp(tmp_path, cache, *args, check=False)
        assert snapshot(sweep / "0") == busy  # no .hydra record, no log line, no results.json
    assert proc.returncode == 2
    assert f"is being written by another posexp process ({other.pid}@" in proc.stderr
    assert "already completed (results.json): skipped" in (sweep / "1" / "train.log").read_text()
