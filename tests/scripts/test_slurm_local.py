"""A sweep through a real one-node Slurm (scripts/slurm_local.sh): sbatch, every job completes.

Skipped, with the reason shown, where Slurm cannot run: not root, or slurm-wlm / munge not
installed (`.ci/run` installs them where apt is available).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import posexp

SCRIPT = Path(__file__).parents[2] / "scripts" / "slurm_local.sh"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged")),
    reason="needs root and Debian's slurm-wlm and munge (apt-get install slurm-wlm munge)",
)


@pytest.fixture(scope="module")
def slurm():
    """The local cluster: started here (or already running), stopped after if started here."""
    running = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True).stdout
    started = "slurmctld: running" not in running
    out = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=True)
    assert "idle" in out.stdout or "already running" in out.stdout, out
    again = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=True)
    assert "already running" in again.stdout  # a second start leaves the cluster alone
    yield
    if started:
        stopped = subprocess.run([str(SCRIPT), "stop"], capture_output=True, text=True, check=True)
        assert "stopped slurmd slurmctld munged" in stopped.stdout


def slurm_sweep(tmp_path: Path, cache: Path, *overrides: str, check: bool = True):
    """`posexp train -m` of a tiny model through the local cluster, into ``tmp_path/sweep``."""
    return posexp(
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


def test_a_sweep_runs_as_slurm_jobs_and_reports(slurm, tmp_path, cache):
    sweep = tmp_path / "sweep"
    proc = slurm_sweep(
        tmp_path, cache, "heads=2", "pe=rope,alibi", "train.max_steps=6", "train.eval_interval=3"
    )
    assert proc.returncode == 0
    jobs = sorted(d.name for d in sweep.iterdir() if d.name.startswith("pe="))
    assert jobs == ["pe=alibi", "pe=rope"]
    for job in jobs:
        assert json.loads((sweep / job / "results.json").read_text())["status"] == "completed"
    # They ran as Slurm jobs: submitit kept each job's sbatch script and log.
    scripts = list((sweep / ".submitit").rglob("*_submission.sh"))
    assert scripts and "#SBATCH --cpus-per-task=1" in scripts[0].read_text()
    posexp(tmp_path, cache, "report", str(sweep))
    assert "2 runs: 2 completed." in (sweep / "report.md").read_text()


def test_a_failing_job_is_recorded_and_does_not_block_the_array(slurm, tmp_path, cache):
    sweep = tmp_path / "sweep"
    # heads 3 does not divide d_model 64: that job fails when its config is built.
    proc = slurm_sweep(tmp_path, cache, "heads=2,3", "train.max_steps=4", check=False)
    # The sweep ends with the failed job's one-line error (exit 2), after the other job ran.
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "error: heads=3 does not divide d_model=64" in proc.stderr
    good = json.loads((sweep / "heads=2" / "results.json").read_text())
    bad = json.loads((sweep / "heads=3" / "results.json").read_text())
    assert good["status"] == "completed"
    assert bad["status"] == "failed" and "heads=3 does not divide d_model=64" in bad["error"]
    posexp(tmp_path, cache, "report", str(sweep))
    assert "2 runs: 1 completed, 1 failed." in (sweep / "report.md").read_text()
