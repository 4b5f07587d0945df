"""How a run dir starts and ends: owned by one process, failures recorded, half-written dirs removed."""

from __future__ import annotations

import contextlib
import copy
import logging
import shlex
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, read_write

from posexp.errors import Abort, JobFailed, PosexpError
from posexp.runtime import distributed
from posexp.runtime.stops import StopRequested
from posexp.store import provenance
from posexp.store.files import disk_full, write_text_atomic
from posexp.store.rundir import HYDRA, OWNER, RunDir

log = logging.getLogger("posexp")

# A dir claimed this recently by another run: the two started together (Hydra's timestamped
# name is the same to the second); older, it is a run from before that got no further.
SAME_TIME_S = 60.0


class Diverged(PosexpError):
    """Training produced a non-finite loss: the run stops as failed, its dir kept to inspect."""


def failure_text(e: BaseException) -> str:
    """The one line a failed job records: a user error's message, else the exception's type and
    first line."""
    if isinstance(e, PosexpError):
        return str(e)
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def record_failure(run_dir: Path, e: BaseException) -> None:
    """``results.json`` = {status: failed, error}; an unexpected error's traceback goes to the log."""
    if not isinstance(e, PosexpError):
        log.error("job failed", exc_info=e)
    RunDir(run_dir).write_results({"status": "failed", "error": failure_text(e)})


def resume_command(run_dir: Path) -> str:
    """The command that resumes ``run_dir``, quoted for a shell where its path needs it (a
    sweep job's ``=`` and ``,`` need nothing: ``posexp train`` quotes a resume path for Hydra)."""
    return f"posexp train {shlex.quote(f'resume={run_dir}')}"


def report_stop(run_dir: Path, e: BaseException, step: int) -> None:
    """Record a stopped run as interrupted and log what was kept and how to resume it."""
    provenance.finish(run_dir, "interrupted")
    if isinstance(e, StopRequested):  # the loop checkpointed the step it stopped after
        log.warning(
            "stopped by %s at step %d, checkpoint saved; resume with: %s",
            e.name,
            e.step,
            resume_command(run_dir),
        )
        return
    saved = RunDir(run_dir).step()
    if saved is None:
        log.warning("interrupted at step %d, before the first checkpoint", step)
    else:
        log.warning(
            "interrupted at step %d; the checkpoint of step %d is kept; resume with: %s",
            step,
            saved,
            resume_command(run_dir),
        )


def remove_run_dir(run_dir: Path, attempts: int = 3) -> None:
    """Remove a run dir that other threads may still write to. A stop at once removes it from
    the signal watcher while the main thread trains on: TensorBoard's writer thread, flushing
    between rmtree's unlinks and its final rmdir, recreates its event file, and the dir (with
    ignore_errors) silently stays. Each retry removes what such a flush put back."""
    for _ in range(attempts):
        shutil.rmtree(run_dir, ignore_errors=True)
        if not run_dir.exists():
            return


def abandon_run(run_dir: Path, discard: bool, why: str) -> None:
    """A stop that could not wait for the step's end (``GracefulStop``): the dir is left
    resumable (its last checkpoint, whole: checkpoints are swapped in atomically) or, with no
    checkpoint yet and ``discard``, removed; one line says which."""
    if not distributed.is_main():
        return
    try:
        saved = RunDir(run_dir).step()
    except PosexpError:
        saved = None
    if saved is None and discard:
        log.warning(
            "stopped at once (%s): no checkpoint yet, nothing to resume; removed %s", why, run_dir
        )
        release_log_files(run_dir)
        remove_run_dir(run_dir)
        return
    with contextlib.suppress(OSError):
        if provenance.opened_here(run_dir):
            provenance.finish(run_dir, "interrupted")
    kept = (
        "no checkpoint yet: rerun it with the same command"
        if saved is None
        else f"the checkpoint of step {saved} is kept; resume with: {resume_command(run_dir)}"
    )
    log.warning("stopped at once (%s); %s", why, kept)


def job_failed(run_dir: Path, e: BaseException) -> NoReturn:
    """End a sweep job that failed: its dir stays, with results.json saying why (`posexp runs`
    and `report` show it), and the sweep goes on to its other jobs."""
    if distributed.is_main():
        record_failure(run_dir, e)
        provenance.finish(run_dir, "failed")
    raise JobFailed(failure_text(e)) from e


def fail_run(run_dir: Path, e: PosexpError, multirun: bool, discard: bool) -> NoReturn:
    """End a job on a user error: a sweep records it and goes on; a single run stops in one line."""
    if multirun:
        log.error("job failed: %s", e)
        job_failed(run_dir, e)
    if isinstance(e, Diverged):
        # The run's dir stays, with results.json saying why it failed.
        if distributed.is_main():
            record_failure(run_dir, e)
            provenance.finish(run_dir, "failed")
        raise Abort(f"{e} (run dir: {run_dir})") from None
    if discard and distributed.is_main() and not RunDir(run_dir).has_checkpoint():
        release_log_files(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing half-written stays behind
    elif distributed.is_main() and provenance.opened_here(run_dir):
        # Training began here and a checkpoint stays (a full disk at step 200): the dir says the
        # session failed and why, as best it can on a disk that may still be full.
        with contextlib.suppress(OSError, RuntimeError):
            record_failure(run_dir, e)
            provenance.finish(run_dir, "failed")
    raise Abort(str(e)) from None


@contextlib.contextmanager
def own_run_dir(run_dir: Path, cfg: DictConfig, multirun: bool) -> Iterator[Path]:
    """The run dir this process alone writes, locked while the body runs (rank 0 holds the lock).

    A new single run claims Hydra's dir (or a sibling, ``claim_run_dir``); a resume or a sweep
    job locks its own dir and is refused in one line while another process writes it, having
    written nothing there: Hydra does not write its record (``hydra.output_subdir: null``), this
    does, once the dir is owned. Under torchrun every rank gets rank 0's dir, or its refusal.
    """
    fresh = not cfg.resume and not multirun
    owned, refused = None, None
    if distributed.is_main():
        try:
            owned = claim_run_dir(run_dir) if fresh else RunDir(run_dir).lock().path
        except PosexpError as e:
            refused = str(e)
        except OSError as e:
            if not disk_full(e):
                raise
            refused = f"no space left on device writing {str(run_dir)!r}; free some space"
            if fresh and {p.name for p in run_dir.iterdir()} <= {OWNER}:  # only what we made
                shutil.rmtree(run_dir, ignore_errors=True)
    refused = distributed.broadcast_object(refused)
    if refused is not None:
        release_log_files(run_dir)  # Hydra's log handler points at the other writer's train.log
        raise PosexpError(refused) if multirun else Abort(refused)
    try:
        if owned is not None:
            try:
                write_hydra_record(owned, cfg, replace=not cfg.resume)
            except OSError as e:
                if not disk_full(e):
                    raise
                full = PosexpError(
                    f"no space left on device writing {str(owned / HYDRA)!r}; free some space"
                )
                fail_run(owned, full, multirun, discard=fresh)
        yield distributed.agree_on_run_dir(owned or run_dir)
    finally:
        if owned is not None:
            RunDir(owned).unlock()


def write_hydra_record(run_dir: Path, cfg: DictConfig, replace: bool = True) -> None:
    """Hydra's record of the composition: ``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml``.

    ``replace=False`` (a resume) writes only missing files: the record says how the run began.
    """
    hydra_cfg = copy.deepcopy(HydraConfig.instance().cfg)
    with read_write(hydra_cfg.hydra):
        hydra_cfg.hydra.output_subdir = HYDRA  # where the record is, as Hydra would have said
    out = run_dir / HYDRA
    out.mkdir(exist_ok=True)
    files = {
        "config.yaml": cfg,
        "hydra.yaml": hydra_cfg,
        "overrides.yaml": hydra_cfg.hydra.overrides.task,
    }
    for name, node in files.items():
        if replace or not (out / name).exists():
            write_text_atomic(out / name, OmegaConf.to_yaml(node))


def claim_run_dir(run_dir: Path) -> Path:
    """The run dir this process owns: Hydra's, unless another run claimed it first.

    Then the run moves to a fresh sibling with its own copy of Hydra's record, and its log file
    follows it, so the two runs never share a checkpoint, a log or TensorBoard events.
    """
    owned = RunDir(run_dir).claim().path
    if owned == run_dir:
        return run_dir
    if (run_dir / HYDRA).is_dir():
        shutil.copytree(run_dir / HYDRA, owned / HYDRA, dirs_exist_ok=True)
    for handler in file_handlers_in(run_dir):
        move_log(handler, owned / Path(handler.baseFilename).name)
    owner = run_dir / OWNER
    age = time.time() - owner.stat().st_mtime if owner.exists() else 0.0
    if age < SAME_TIME_S:
        who = RunDir(run_dir).holder()
        log.warning(
            "%s was taken by a run started in the same second%s; this run uses %s",
            run_dir,
            f" ({who})" if who else "",
            owned,
        )
    else:  # an explicit hydra.run.dir of an older run that never got as far as its record
        log.warning(
            "%s belongs to a run started %s ago; this run uses %s", run_dir, _age(age), owned
        )
    return owned


def discard_interrupted(run_dir: Path) -> None:
    """After Ctrl-C, remove a new run's dir that has no checkpoint to resume (as after an error)."""
    if distributed.is_main() and not RunDir(run_dir).has_checkpoint():
        log.warning(
            "interrupted before the first checkpoint: nothing to resume; removed %s", run_dir
        )
        release_log_files(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)


def _age(seconds: float) -> str:
    """2h05m, 36m or 42s."""
    s = int(seconds)
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m" if s >= 60 else f"{s}s"
    )


def release_log_files(run_dir: Path) -> None:
    """Detach and close the log handlers writing into ``run_dir`` (before it is deleted).

    Only those: a global ``logging.shutdown()`` would leave closed handlers on the root logger
    that reopen their (deleted) files at the next log call of a longer-lived process.
    """
    for handler in file_handlers_in(run_dir):
        logging.getLogger().removeHandler(handler)
        handler.close()


def move_log(handler: logging.FileHandler, path: Path) -> None:
    """The root logger's ``handler`` replaced by one like it writing (appending) to ``path``."""
    moved = logging.FileHandler(path, delay=True)
    moved.setFormatter(handler.formatter)
    moved.setLevel(handler.level)
    root = logging.getLogger()
    root.removeHandler(handler)
    handler.close()
    root.addHandler(moved)


def keep_log_name(run_dir: Path) -> None:
    """A resumed fine-tune goes on logging to its ``finetune.log``, not a new ``train.log``
    (the command that resumes any run is `posexp train`, and Hydra names the log after it)."""
    if not (run_dir / "finetune.log").is_file():
        return
    for handler in file_handlers_in(run_dir):
        if Path(handler.baseFilename).name == "train.log":
            move_log(handler, run_dir / "finetune.log")


def file_handlers_in(run_dir: Path) -> list[logging.FileHandler]:
    """The root logger's file handlers that write into ``run_dir`` (Hydra's ``<job>.log``)."""
    target = run_dir.resolve()
    return [
        h
        for h in logging.getLogger().handlers
        if isinstance(h, logging.FileHandler) and Path(h.baseFilename).is_relative_to(target)
    ]
