"""Fault-tolerant sweeps: failed jobs recorded, finished jobs skipped, unfinished ones resumed.

Rerunning a sweep with the same ``hydra.sweep.dir`` finds each job's dir again: a job whose
``results.json`` says completed returns its saved results, one that left a checkpoint resumes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from posexp.config import RESUME_ROOTS, RunConfig
from posexp.errors import PosexpError
from posexp.store.rundir import RunDir

log = logging.getLogger("posexp")

# train.* keys that do not change what a finished job computed.
RUNTIME_TRAIN_KEYS = (
    "threads",
    "compile",
    "deterministic",
    "log_interval",
    "checkpoint_interval",
    "stop_grace_s",
    "resume_schedule",
)


def completed_results(run: RunConfig, run_dir: Path) -> dict[str, Any] | None:
    """A rerun sweep job whose dir has ``results.json`` with status completed: its saved results."""
    saved = RunDir(run_dir).results()
    if saved is None or saved.get("status") != "completed":
        return None
    check_same_job(run, run_dir)
    log.info("%s already completed (results.json): skipped", run_dir)
    return {k: v for k, v in saved.items() if k != "status"}


def continue_unfinished(run: RunConfig, run_dir: Path) -> bool:
    """True when a rerun sweep job left a checkpoint (killed, failed, timed out): resume it."""
    job = RunDir(run_dir)
    job.clear_results()  # a stale "failed" from the last attempt
    if not job.has_checkpoint():
        return False  # nothing saved: train from scratch
    check_same_job(run, run_dir)
    log.info("%s has a checkpoint and no results: resuming it", run_dir)
    return True


def check_same_job(run: RunConfig, run_dir: Path) -> None:
    """Refuse to reuse a job dir trained with different settings (same dir name, other config)."""
    try:
        saved = flatten(RunDir(run_dir).config().to_dict())
    except PosexpError:
        return
    want = flatten(run.to_dict())
    roots = (*RESUME_ROOTS, "seed", "train")
    skip = {f"train.{k}" for k in RUNTIME_TRAIN_KEYS}
    differ = sorted(
        k
        for k in want.keys() & saved.keys()
        if k.split(".")[0] in roots and k not in skip and want[k] != saved[k]
    )
    if differ:
        shown = ", ".join(f"{k}={saved[k]!r} there, {want[k]!r} now" for k in differ[:3])
        raise PosexpError(
            f"{run_dir} holds a run with other settings ({shown}); "
            "rerun with its own command or a new hydra.sweep.dir"
        )


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {"a.b": leaf}; lists are leaves."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        out.update(flatten(v, f"{key}.") if isinstance(v, dict) else {key: v})
    return out
