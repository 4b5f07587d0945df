"""Sweeps through a real one-node Slurm (scripts/slurm_local.sh): sbatch, every job completes;
a time limit, `scontrol requeue` and `scancel` lose nothing (sha256-equal final weights).

Skipped, with the reason shown, where Slurm cannot run: not root, or slurm-wlm / munge not
installed (`.ci/run` installs them where apt is available).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import posexp_command, posexp_env

SCRIPT = Path(__file__).parents[2] / "scripts" / "slurm_local.sh"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged")),
    reason="needs root and Debian's slurm-wlm and munge (apt-get install slurm-wlm munge)",
)


# With slurmdbd and MariaDB installed, slurm_local.sh starts accounting: sacct answers submitit.
ACCOUNTING = bool(shutil.which("slurmdbd") and shutil.which("mariadbd"))


@pytest.fixture(scope="module")
def slurm():
    """The local cluster: started here (or already running), stopped after if started here."""
    running = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True).stdout
    started = "slurmctld: running" not in running
    out = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=True)
    assert "idle" in out.stdout or "already running" in out.stdout, out
    if started:
        assert ("accounting on" in out.stdout) == ACCOUNTING, out.stdout
    again = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=True)
    assert "already running" in again.stdout  # a second start leaves the cluster alone
    yield
    if started:
        stopped = subprocess.run([str(SCRIPT), "stop"], capture_output=True, text=True, check=True)
        daemons = ["slurmd", "slurmctld", *(["slurmdbd", "mariadbd"] * ACCOUNTING), "munged"]
        assert f"stopped {' '.join(daemons)}" in stopped.stdout


def slurm_sweep(tmp_path: Path, cache: Path, *overrides: str, check: bool = True):
    """`posexp train -m` of a tiny model through the local cluster, into ``tmp_path/sweep``."""
    return posexp_command(
        tmp_path,
        cache,
        "train",
        "-m",
        "hydra/launcher=submitit_slurm_cpu",
        "model=tiny",
        "train.seq_len=32",
        "train.batch_size=4",
        *overrides,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        check=check,
    )


def test_a_sweep_runs_as_slurm_jobs_and_reports(slurm, uninterrupted, tmp_path, cache):
    sweep = tmp_path / "sweep"
    proc = slurm_sweep(
        tmp_path, cache, "heads=2", "pe=rope,alibi", "train.max_steps=6", "train.eval_interval=3"
    )
    assert proc.returncode == 0
    if ACCOUNTING:  # submitit's status polls got answers: no "Bypassing sacct error" warnings
        assert "sacct" not in proc.stdout + proc.stderr
    assert "ConfigStore schema" not in proc.stderr  # nor Hydra's notice on the launcher configs
    jobs = sorted(d.name for d in sweep.iterdir() if d.name.startswith("pe="))
    assert jobs == ["pe=alibi", "pe=rope"]
    for job in jobs:
        assert json.loads((sweep / job / "results.json").read_text())["status"] == "completed"
    # They ran as Slurm jobs: submitit kept each job's sbatch script and log.
    scripts = list((sweep / ".submitit").rglob("*_submission.sh"))
    assert scripts and "#SBATCH --cpus-per-task=1" in scripts[0].read_text()
    posexp_command(tmp_path, cache, "report", str(sweep))
    assert "2 runs: 2 completed." in (sweep / "report.md").read_text()


def test_a_failing_job_is_recorded_and_does_not_block_the_array(
    slurm, tmp_path, cache, monkeypatch
):
    sweep = tmp_path / "sweep"
    monkeypatch.setenv("POSEXP_SWEEP_CHECK", "0")  # not refused up front: each job on its own
    # heads 3 does not divide d_model 64: that job fails when its config is built.
    proc = slurm_sweep(tmp_path, cache, "heads=2,3", "train.max_steps=4", check=False)
    # The sweep ends on its summary, the failed job with its error, then one line (exit 2),
    # after the other job ran.
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "  heads=3: failed: heads=3 does not divide d_model=64" in proc.stderr
    assert (
        proc.stderr.rstrip()
        .splitlines()[-1]
        .startswith("error: 1 of 2 sweep jobs failed (listed above); the others ran")
    )
    good = json.loads((sweep / "heads=2" / "results.json").read_text())
    bad = json.loads((sweep / "heads=3" / "results.json").read_text())
    assert good["status"] == "completed"
    assert bad["status"] == "failed" and "heads=3 does not divide d_model=64" in bad["error"]
    posexp_command(tmp_path, cache, "report", str(sweep))
    assert "2 runs: 1 completed, 1 failed." in (sweep / "report.md").read_text()


def test_a_request_no_node_can_run_is_refused_before_anything_is_submitted(slurm, tmp_path, cache):
    # 64 CPUs of a node with 2: Slurm would accept the jobs and keep them pending for ever
    # (reason PartitionConfig); the sweep is refused in one line, nothing submitted or made.
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    proc = slurm_sweep(
        tmp_path, cache, "hydra.launcher.cpus_per_task=64", "pe=rope,alibi", check=False
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "error: hydra.launcher.cpus_per_task=64 cannot run on Slurm partition 'local': its "
        f"largest node has {os.cpu_count()} CPUs; lower it, or pick another partition "
        "(no partition here fits)"
    ]
    after = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    assert after == before and not (tmp_path / "sweep").exists()


# Preemption and time limits. One training (the tiny model, one thread, fp32) several ways: an
# uninterrupted plain run gives the weights every requeued or cancelled Slurm job must end with.
# The time-limit test trains "for ever" (LONG_STEPS: past Slurm's signal, 10-40 s in, on any
# machine) and ends once the job has resumed: the stop and resume it checks are those of the
# SIGTERM tests, whose weights are compared, and a 24,000-step reference for it took a core for
# five minutes of the suite.
LONG_STEPS = 10**7
SHORT_STEPS = 1500  # about 10 s: long enough for the test to requeue or cancel it mid-training
TRAIN = (
    "model=tiny",
    "train.seq_len=32",
    "train.batch_size=4",
    "pe=rope",
    "train.precision=fp32",
    "train.checkpoint_interval=100000",  # the only checkpoint before the end is the signal's
    # One small evaluation at the end: periodic ones would double the CPU time of every run.
    "train.eval_interval=100000",
    "train.eval_tokens=2048",
)
DEADLINE_S = 420


def weights_sha256(run: Path) -> str:
    return hashlib.sha256((run / "checkpoint" / "model.safetensors").read_bytes()).hexdigest()


class Uninterrupted:
    """A plain uninterrupted run (one thread) of SHORT_STEPS, started when the module starts: it
    trains while the first tests wait on the scheduler, and a test waits for it only when it
    compares weights."""

    def __init__(self, tmp: Path, cache: Path) -> None:
        self.runs = {steps: tmp / f"run{steps}" for steps in (SHORT_STEPS,)}
        self.procs = {
            steps: subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "posexp",
                    "train",
                    *TRAIN,
                    f"train.max_steps={steps}",
                    "train.threads=1",
                    f"hydra.run.dir={run}",
                ],
                cwd=tmp,
                env=posexp_env(cache),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for steps, run in self.runs.items()
        }

    def sha256(self, steps: int) -> str:
        """sha256 of the weights after ``steps`` uninterrupted steps (waits for that run)."""
        proc = self.procs[steps]
        if proc.returncode is None:
            _, err = proc.communicate()
            assert proc.returncode == 0, err[-2000:]
        assert proc.returncode == 0
        return weights_sha256(self.runs[steps])

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.kill()
                proc.communicate()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cache):
    """The reference runs, started once for the module (module fixtures set up at first use,
    so the first test asks for it)."""
    refs = Uninterrupted(tmp_path_factory.mktemp("uninterrupted"), cache)
    yield refs
    refs.stop()


def launch_sweep(tmp_path: Path, cache: Path, *overrides: str) -> subprocess.Popen:
    """The sweep's `posexp train -m` through Slurm, left running (the test drives it); its
    output goes to ``tmp_path/launcher.out`` and ``launcher.err`` (read by ``stderr``)."""
    args = [
        "train",
        "-m",
        "hydra/launcher=submitit_slurm_cpu",
        *TRAIN,
        *overrides,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    with open(tmp_path / "launcher.out", "w") as out, open(tmp_path / "launcher.err", "w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "posexp", *args],
            cwd=tmp_path,
            env=posexp_env(cache),
            stdout=out,
            stderr=err,
        )


def stderr(tmp_path: Path) -> str:
    return (tmp_path / "launcher.err").read_text()


def job_ids(sweep: Path) -> list[str]:
    """The Slurm ids of the sweep's jobs (array tasks as `<array>_<task>`), from submitit's dirs."""
    return sorted(d.name for d in (sweep / ".submitit").iterdir() if d.name[0].isdigit())


def stopped_by(job_dir: Path, signal_name: str) -> bool:
    """The job's log says a session stopped on ``signal_name`` with a checkpoint."""
    log = job_dir / "train.log"
    return log.exists() and f"stopped by {signal_name} at step" in log.read_text()


# slurmd refuses to start a requeued job whose new credential dates from the same second as the
# revocation of its old one ("Job credential revoked"; the job then ends FAILED), so a requeued
# job is released only after it has been seen waiting for this long.
RELEASE_AFTER_S = 2.0


def release_requeued(
    sweep: Path,
    longer_limit: tuple[int, Callable[[], bool]] | None,
    waiting_since: dict[str, float],
) -> None:
    """Lift the hold Slurm puts on a requeued job (Reason=BeginTime, about 2 min), as an admin
    can with `scontrol update`, so the requeue -> restart path runs in seconds. With
    ``longer_limit`` = (minutes, when), the restarted job gets that time limit once when() holds.
    ``waiting_since`` remembers when each job was first seen held."""
    if not (sweep / ".submitit").is_dir():
        return
    for job in job_ids(sweep):
        reason = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%r"], capture_output=True, text=True
        ).stdout.strip()
        if reason != "BeginTime":
            waiting_since.pop(job, None)
            continue
        first_seen = waiting_since.setdefault(job, time.monotonic())
        if time.monotonic() - first_seen < RELEASE_AFTER_S:
            continue
        # No checks: the job may have started between the calls.
        if longer_limit is not None and longer_limit[1]():
            limit = f"TimeLimit={longer_limit[0]}"
            subprocess.run(["scontrol", "update", f"JobId={job}", limit])
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"])
        waiting_since.pop(job)


def drive(
    proc: subprocess.Popen,
    sweep: Path,
    until: Callable[[], bool] | None = None,
    longer_limit: tuple[int, Callable[[], bool]] | None = None,
) -> bool:
    """Poll the launcher (one-second waits on it) and release requeued jobs until ``until()``
    holds (True) or the launcher exits (False); fail the test past the deadline."""
    end = time.monotonic() + DEADLINE_S
    waiting_since: dict[str, float] = {}
    while time.monotonic() < end:
        if until is not None and until():
            return True
        try:
            proc.wait(timeout=1)
            return False
        except subprocess.TimeoutExpired:
            release_requeued(sweep, longer_limit, waiting_since)
    proc.kill()
    if (sweep / ".submitit").is_dir():  # leave no job behind on the cluster
        subprocess.run(["scancel", *job_ids(sweep)])
    pytest.fail(f"the sweep did not finish in {DEADLINE_S} s")


def training(job_dir: Path) -> bool:
    """The job has trained some steps (its log shows a progress line)."""
    log = job_dir / "train.log"
    return log.exists() and re.search(r"step \d+/\d+", log.read_text()) is not None


def sessions(job_dir: Path) -> list[dict]:
    return json.loads((job_dir / "provenance.json").read_text())["sessions"]


def assert_resumed_where_it_stopped(job_dir: Path, signal_name: str, steps: int) -> None:
    """Every stop checkpointed the step it was in, and the next session resumed from that step."""
    log = (job_dir / "train.log").read_text()
    stopped = [int(s) for s in re.findall(rf"stopped by {signal_name} at step (\d+)", log)]
    resumed = [int(s) for s in re.findall(r"resumed \S+ at step (\d+)", log)]
    assert stopped and stopped == resumed, log[-3000:]
    assert all(0 < step < steps for step in stopped), stopped


def test_a_time_limit_signals_requeues_and_resumes_where_it_stopped(slurm, tmp_path, cache):
    # Limit 1 min, signal 50 s before it: Slurm sends submitit's SIGUSR2 10-40 s in (its
    # timer runs every 30 s). Not sooner: until submitit has unpickled the task (seconds on a
    # loaded machine) SIGUSR2's default action kills the job instead of requeueing it.
    sweep = tmp_path / "sweep"
    proc = launch_sweep(
        tmp_path,
        cache,
        f"train.max_steps={LONG_STEPS}",
        "hydra.launcher.timeout_min=1",
        "hydra.launcher.signal_delay_s=50",
        # A signal during start-up (submitit handles it from about 1 s in: the task it unpickles
        # imports no torch) requeues that session before training starts: spare requeues for it.
        "hydra.launcher.max_num_timeout=10",
    )

    def job_dir() -> Path | None:
        if not sweep.is_dir():  # the launcher has not made it yet
            return None
        dirs = [d for d in sweep.iterdir() if d.is_dir() and d.name[0] != "."]
        return dirs[0] if dirs else None

    def signalled_in_training() -> bool:
        return job_dir() is not None and stopped_by(job_dir(), "SIGUSR2")

    def training_again() -> bool:
        """A later session has resumed and logged a step of its own."""
        if not signalled_in_training():
            return False
        after = (job_dir() / "train.log").read_text().split("] resumed ")[1:]
        return bool(after) and re.search(r"step \d+/\d+", after[-1]) is not None

    # Once a session has stopped on the signal with its checkpoint, the requeued job gets 5
    # minutes, as an admin could give it: more one-minute sessions would only spend requeues.
    try:
        assert drive(proc, sweep, until=training_again, longer_limit=(5, signalled_in_training))
    finally:
        if (sweep / ".submitit").is_dir():  # the job trains on: end it (SIGTERM), and the sweep
            subprocess.run(["scancel", *job_ids(sweep)])
        drive(proc, sweep)
    log = (job_dir() / "train.log").read_text()
    assert_resumed_where_it_stopped(job_dir(), "SIGUSR2", LONG_STEPS)
    runs = sessions(job_dir())
    # Each session the time-limit signal ended is interrupted, then the one scancel ended.
    assert [s["status"] for s in runs] == ["interrupted"] * len(runs), log[-3000:]
    assert len(runs) >= 2 and "stopped by SIGTERM" in log.rsplit("resumed ", 1)[1]
    # One Slurm job throughout, restarted by each requeue, in its own job dir (a session the
    # signal ended before training began recorded none, so restart counts may skip one).
    assert len({s["scheduler"]["job_id"] for s in runs}) == 1
    restarts = [int(s["scheduler"]["restart_count"]) for s in runs]
    assert restarts == sorted(set(restarts)) and len(restarts) == len(runs)


def test_scontrol_requeue_mid_training_resumes_to_the_same_weights(
    slurm, tmp_path, cache, uninterrupted
):
    sweep = tmp_path / "sweep"
    proc = launch_sweep(tmp_path, cache, f"train.max_steps={SHORT_STEPS}")

    def job_dir() -> Path | None:
        dirs = [d for d in sweep.iterdir() if d.is_dir() and d.name[0] != "."]
        return dirs[0] if dirs else None

    def started() -> bool:
        return sweep.is_dir() and job_dir() is not None and training(job_dir())

    assert drive(proc, sweep, until=started)
    (job,) = job_ids(sweep)
    subprocess.run(["scontrol", "requeue", job], check=True)  # Slurm sends SIGTERM, requeues
    drive(proc, sweep)
    assert proc.returncode == 0, stderr(tmp_path)[-3000:]
    assert_resumed_where_it_stopped(job_dir(), "SIGTERM", SHORT_STEPS)
    assert [s["status"] for s in sessions(job_dir())] == ["interrupted", "completed"]
    assert weights_sha256(job_dir()) == uninterrupted.sha256(SHORT_STEPS)


needs_accounting = pytest.mark.skipif(
    not ACCOUNTING,
    reason="needs slurmdbd and mariadb-server (apt-get install slurmdbd mariadb-server): "
    "without accounting submitit cannot see a cancelled job end",
)


@needs_accounting
def test_scancel_of_a_sweep_then_the_same_command_finishes_it(
    slurm, tmp_path, cache, uninterrupted
):
    sweep = tmp_path / "sweep"
    steps = f"train.max_steps=300,{SHORT_STEPS}"
    short, long = sweep / "train.max_steps=300", sweep / f"train.max_steps={SHORT_STEPS}"
    proc = launch_sweep(tmp_path, cache, steps)
    done_short = lambda: (short / "results.json").exists() and training(long)  # noqa: E731
    assert drive(proc, sweep, until=done_short)
    array = job_ids(sweep)[0].split("_")[0]
    subprocess.run(["scancel", array], check=True)  # the whole array
    drive(proc, sweep)
    # sacct says CANCELLED: the launcher ends with one line saying how to finish the sweep.
    assert proc.returncode == 1
    err = stderr(tmp_path).strip().splitlines()[-1]
    assert err.startswith("error: a sweep job ended without a result (Slurm state CANCELLED")
    assert f"rerun the same command with hydra.sweep.dir={sweep}" in err
    assert sessions(long)[-1]["status"] == "interrupted"
    proc = launch_sweep(tmp_path, cache, steps)  # the same command, the same sweep dir
    drive(proc, sweep)
    assert proc.returncode == 0, stderr(tmp_path)[-3000:]
    assert "already completed (results.json): skipped" in (short / "train.log").read_text()
    assert [s["status"] for s in sessions(short)] == ["completed"]  # not retrained
    assert_resumed_where_it_stopped(long, "SIGTERM", SHORT_STEPS)
    assert weights_sha256(long) == uninterrupted.sha256(SHORT_STEPS)
