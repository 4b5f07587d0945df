"""How a run dir starts and ends: claimed by one process, failures recorded, half-written dirs removed."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import NoReturn

from posexp.errors import Abort, PosexpError
from posexp.rundir import RunDir
from posexp.runtime import distributed, provenance
from posexp.runtime.sweeps import record_failure

log = logging.getLogger("posexp")


class Diverged(PosexpError):
    """Training produced a non-finite loss: the run stops as failed, its dir kept to inspect."""


def fail_run(run_dir: Path, e: PosexpError, multirun: bool, discard: bool) -> NoReturn:
    """End a job on a user error: a sweep records it and goes on; a single run stops in one line."""
    if multirun or isinstance(e, Diverged):
        # The job's dir stays, with results.json saying why it failed (`posexp report` shows it).
        if distributed.is_main():
            record_failure(run_dir, e)
            provenance.finish(run_dir, "failed")
        if multirun:
            raise e
        raise Abort(f"{e} (run dir: {run_dir})") from None
    if discard and distributed.is_main() and not RunDir(run_dir).has_checkpoint():
        release_log_files(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing half-written stays behind
    raise Abort(str(e)) from None


def claim_run_dir(run_dir: Path) -> Path:
    """The run dir this process owns: Hydra's, unless a run started in the same second took it.

    Then the run moves to a fresh sibling with its own copy of Hydra's record, and its log file
    follows it, so the two runs never share a checkpoint, a log or TensorBoard events.
    """
    owned = RunDir(run_dir).claim().path
    if owned == run_dir:
        return run_dir
    shutil.copytree(run_dir / ".hydra", owned / ".hydra", dirs_exist_ok=True)
    root = logging.getLogger()
    for handler in file_handlers_in(run_dir):
        moved = logging.FileHandler(owned / Path(handler.baseFilename).name)
        moved.setFormatter(handler.formatter)
        moved.setLevel(handler.level)
        root.removeHandler(handler)
        handler.close()
        root.addHandler(moved)
    log.warning("%s was taken by a run started in the same second; this run uses %s", run_dir, owned)
    return owned


def release_log_files(run_dir: Path) -> None:
    """Detach and close the log handlers writing into ``run_dir`` (before it is deleted).

    Only those: a global ``logging.shutdown()`` would leave closed handlers on the root logger
    that reopen their (deleted) files at the next log call of a longer-lived process.
    """
    for handler in file_handlers_in(run_dir):
        logging.getLogger().removeHandler(handler)
        handler.close()


def file_handlers_in(run_dir: Path) -> list[logging.FileHandler]:
    """The root logger's file handlers that write into ``run_dir`` (Hydra's ``<job>.log``)."""
    target = run_dir.resolve()
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)
            and Path(h.baseFilename).is_relative_to(target)]
