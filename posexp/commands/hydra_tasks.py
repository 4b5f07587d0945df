"""The functions Hydra runs for `posexp train` and `posexp finetune`, cheap to import.

A launcher pickles its task function by reference, and a Slurm job unpickles it before
submitit installs its signal handlers. Until then the time-limit signal (SIGUSR2) kills the job
outright, so the module named in the pickle imports nothing heavy: torch and the training code
load when the task runs, with the handlers in place (measured: unpickling a sweep job took
2.4 s with torch imported at the top, on an idle machine, and several times that under load).
Shell completion, which composes configs through Hydra, skips torch for the same reason.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from posexp.errors import JobFailed

log = logging.getLogger("posexp")


# How the last sweep in this process ended: SweepSummary sets it, `run_hydra` reads it to exit
# non-zero when jobs failed (their tasks returned a failure instead of raising).
LAST_SWEEP: dict[str, Any] = {}


def train(cfg: DictConfig) -> dict[str, Any] | None:
    """`posexp train`'s task: one training run (a sweep job under ``-m``)."""
    from posexp.commands.train import train_task

    try:
        return train_task(cfg)
    except JobFailed as e:
        return e.results


def finetune(cfg: DictConfig) -> dict[str, Any] | None:
    """`posexp finetune`'s task: a new run continuing a parent at a longer length."""
    from posexp.commands.finetune import finetune_task

    try:
        return finetune_task(cfg)
    except JobFailed as e:
        return e.results


class SweepSummary(Callback):
    """After a sweep: how its jobs ended (the failed ones with their error) and the command that
    reports it, so a sweep does not end on the last job's log line."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Hydra calls this in the launching process once every job has returned."""
        from posexp.commands.runs import list_runs
        from posexp.errors import PosexpError

        sweep = str(config.hydra.sweep.dir)
        try:
            rows = list_runs(sweep)
        except PosexpError as e:  # no job got as far as its dir: nothing to sum up
            log.warning("sweep %s: %s", sweep, e)
            return
        counts = Counter(row["status"] for row in rows)
        shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        lines = [f"sweep {sweep}: {len(rows)} jobs, {shown}"]
        lines += [f"  {r['run']}: {_ended(sweep, r)}" for r in rows if r["status"] != "completed"]
        lines.append(f"report: posexp report {sweep}")
        LAST_SWEEP.update(dir=sweep, jobs=len(rows), failed=counts.get("failed", 0))
        # Plain lines on stderr: the launcher's log format is Hydra's, not the jobs'.
        print("\n".join(lines), file=sys.stderr, flush=True)


def _ended(sweep: str, row: dict[str, Any]) -> str:
    """A job's status, with the error its results.json records when it failed."""
    from pathlib import Path

    from posexp.store.rundir import RunDir

    results = RunDir(Path(sweep) / row["run"]).results() if row["status"] == "failed" else None
    error = (results or {}).get("error")
    return f"failed: {error}" if error else str(row["status"])
