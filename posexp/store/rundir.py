"""A run dir's layout, in one type: what it holds and whether it is a run (its trained model is
loaded by ``posexp.runtime.weights``, above the storage).

``<run>/`` holds ``.owner`` (the lock of the one process writing it, ``posexp.store.runlock``),
``.hydra/`` (the composed config and the command-line overrides), ``train.log``,
TensorBoard event files, ``checkpoint/`` (see ``posexp.store.checkpoint``), ``results.json`` (status
completed or failed, final metrics), ``provenance.json`` and ``eval/`` (eval-extrapolate's
outputs). A sweep dir holds job dirs of that layout below it, plus Hydra's ``multirun.yaml``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posexp.checks import user_path
from posexp.config import RunConfig
from posexp.errors import PosexpError, UnreadableFile
from posexp.store import runlock
from posexp.store.checkpoint import (
    CHECKPOINT,
    checkpoint_dir,
    has_checkpoint,
    read_meta,
)
from posexp.store.files import keep_damaged, read_json, write_json_atomic

log = logging.getLogger("posexp")

RESULTS = "results.json"
EVAL = "eval"
HYDRA = ".hydra"
PROVENANCE = "provenance.json"
TOKENIZER = "tokenizer.json"  # a learned vocabulary (BPE), kept so the run needs no data to decode
SWEEP_MARK = "multirun.yaml"
OWNER = runlock.OWNER  # created by the run's first process; locked by whoever writes the dir


@dataclass(frozen=True, order=True)
class RunDir:
    """One run's folder; every reader and writer of a run's files goes through it."""

    path: Path

    @classmethod
    def open(cls, path: Path | str, what: str = "run dir") -> RunDir:
        """An existing folder, else a one-line error saying what is there instead."""
        p = user_path(what, path)
        label = f"{what}{str(p)!r}" if what.endswith("=") else f"{what} {str(p)!r}"
        if p.is_file():
            raise PosexpError(
                f"{label} is a file; pass the run's folder "
                f"(the one holding {CHECKPOINT}/ and {RESULTS})"
            )
        if not p.is_dir():
            raise PosexpError(f"{label}: no such {'directory' if what == 'folder' else 'run dir'}")
        return cls(p)

    @classmethod
    def open_run(cls, path: Path | str, what: str = "--run") -> RunDir:
        """``open``, and a run: a sweep dir is refused naming its jobs, any other folder saying
        what a run dir holds (where a command takes one run, never a guess)."""
        folder = cls.open(path, what)
        if folder.is_run():
            return folder
        try:
            jobs = find_runs(folder.path)
        except PosexpError:
            jobs = []
        if jobs:
            names = [str(j.path.relative_to(folder.path)) for j in jobs]
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            raise PosexpError(
                f"{what} {str(folder.path)!r} is a folder of {len(jobs)} runs ({shown}); "
                f"pass one of them"
            )
        raise PosexpError(
            f"{what} {str(folder.path)!r} is not a run dir (it holds no {CHECKPOINT}/, "
            f"{RESULTS} or {HYDRA}/); pass a run from `posexp runs`"
        )

    # ---- layout -------------------------------------------------------------------------------

    @property
    def results_file(self) -> Path:
        """``results.json``: written once, when the run completes or fails."""
        return self.path / RESULTS

    @property
    def eval_dir(self) -> Path:
        """Where ``posexp eval-extrapolate`` writes its JSON, CSV and plots."""
        return self.path / EVAL

    @property
    def hydra_dir(self) -> Path:
        """Hydra's record of the composition: ``config.yaml``, ``overrides.yaml``."""
        return self.path / HYDRA

    @property
    def tokenizer_file(self) -> Path:
        """The learned tokenizer the run trained with (BPE runs; absent for bytes)."""
        return self.path / TOKENIZER

    def tokenizer_digest(self) -> str | None:
        """The sha256 of the kept ``tokenizer.json`` (None: the run keeps none): the identity the
        checkpoint records, so a tokenizer copied in from another run is known for what it is."""
        import hashlib

        try:
            return hashlib.sha256(self.tokenizer_file.read_bytes()).hexdigest()
        except FileNotFoundError:
            return None

    @property
    def provenance_file(self) -> Path:
        """Versions, machine and session times (``posexp.store.provenance``)."""
        return self.path / PROVENANCE

    def is_run(self) -> bool:
        """True for a folder a run has started in (Hydra's record, results or a checkpoint)."""
        return self.hydra_dir.is_dir() or self.results_file.is_file() or self.has_checkpoint()

    # ---- reading ------------------------------------------------------------------------------

    def has_checkpoint(self) -> bool:
        """True when the run saved a checkpoint (or the previous one survives a cut swap)."""
        return has_checkpoint(self.path)

    def meta(self) -> dict[str, Any]:
        """The checkpoint's metadata: step, model config, run config; a one-line error if none."""
        meta = read_meta(self.path)
        for key in ("model", "config", "step"):
            if key not in meta:
                raise PosexpError(
                    f"corrupt checkpoint {str(checkpoint_dir(self.path))!r}: its "
                    f"meta.json has no {key!r}"
                )
        return meta

    def step(self) -> int | None:
        """The checkpoint's step, None without a checkpoint."""
        return int(self.meta()["step"]) if self.has_checkpoint() else None

    def results(self) -> dict[str, Any] | None:
        """``results.json`` as a dict; None if absent or unreadable (``results_problem`` says why)."""
        try:
            return read_json(self.results_file, results_shape)
        except UnreadableFile:
            return None

    def results_problem(self) -> str | None:
        """Why ``results.json`` exists but cannot be read (cut short, not JSON); None otherwise."""
        try:
            read_json(self.results_file, results_shape)
        except UnreadableFile as e:
            return str(e)
        return None

    def status(self) -> str:
        """completed, failed, unfinished (running, killed, interrupted) or unreadable (results.json)."""
        results = self.results()
        if results is None and self.results_problem():
            return "unreadable"
        return str((results or {}).get("status") or "unfinished")

    def saved_config(self) -> dict[str, Any] | None:
        """The run's config as saved (checkpoint meta, else Hydra's record), as plain data."""
        if self.has_checkpoint():
            try:
                return dict(self.meta()["config"])
            except PosexpError:
                pass
        import yaml

        try:
            data = yaml.safe_load((self.hydra_dir / "config.yaml").read_text())
        except (OSError, yaml.YAMLError):
            return None
        return _resolved(data) if isinstance(data, dict) else None

    def config(self) -> RunConfig:
        """The run's typed config; the token cache is this shell's ``POSEXP_CACHE`` when set."""
        saved = self.saved_config()
        if saved is None:
            raise PosexpError(
                f"{str(self.path)!r} has no saved config "
                f"(expected {CHECKPOINT}/meta.json or {HYDRA}/config.yaml)"
            )
        run = RunConfig.from_saved(saved)
        if os.environ.get("POSEXP_CACHE"):
            run = run.replace(cache_dir=os.environ["POSEXP_CACHE"])
        return run

    def overrides(self) -> list[str]:
        """The command-line overrides the run was started with (``.hydra/overrides.yaml``)."""
        import yaml

        try:
            data = yaml.safe_load((self.hydra_dir / "overrides.yaml").read_text())
        except (OSError, yaml.YAMLError):
            return []
        return [str(o) for o in data or []] if isinstance(data, list) else []

    # ---- writing ------------------------------------------------------------------------------

    def claim(self) -> RunDir:
        """This dir, locked, if no process ever claimed it, else a new ``<name>-2``, ``-3``, ... dir.

        Two runs started in the same second with the same overrides get the same timestamped dir
        from Hydra. Creating ``.owner`` exclusively decides which one keeps it (atomic on every
        file system); the other moves to the first free sibling, created just as exclusively.
        The claimant holds the dir's lock (``posexp.store.runlock``) until ``unlock``.
        """
        for n in range(1, 1000):
            candidate = self.path if n == 1 else self.path.with_name(f"{self.path.name}-{n}")
            try:
                candidate.mkdir(parents=True, exist_ok=n == 1)
            except FileExistsError:
                continue
            if runlock.claim(candidate):
                return RunDir(candidate)
        raise PosexpError(f"could not claim a run dir next to {str(self.path)!r}")

    def lock(self, what: str = "run dir") -> RunDir:
        """Hold this dir's writer lock; a one-line error while another process writes it."""
        runlock.lock(self.path, what)
        return self

    def share(self, what: str = "run dir") -> RunDir:
        """Hold this dir's lock shared with other evaluations; one line while a run trains in it."""
        runlock.share(self.path, what)
        return self

    def unlock(self) -> None:
        """Give back ``lock`` or ``claim`` (the last one releases the dir)."""
        runlock.unlock(self.path)

    def holder(self) -> str | None:
        """``pid@host`` of another process writing this dir now, else None."""
        return runlock.holder(self.path)

    def check_free(self, what: str = "run dir") -> None:
        """A one-line error if another process writes this dir now (takes no lock)."""
        who = self.holder()
        if who is not None:
            raise PosexpError(runlock.busy_message(self.path, who, what))

    @contextlib.contextmanager
    def writing(self, what: str = "run dir") -> Iterator[RunDir]:
        """This dir, locked for the ``with`` body: the one process writing it meanwhile."""
        self.lock(what)
        try:
            yield self
        finally:
            self.unlock()

    def write_results(self, results: dict[str, Any]) -> None:
        """Write ``results.json`` atomically (a damaged one is kept as ``results.json.bak``)."""
        self._keep_if_damaged()
        write_json_atomic(self.results_file, results)

    def clear_results(self) -> None:
        """Forget a stale ``results.json`` (a failed attempt, before a rerun); a damaged one is
        kept as ``results.json.bak``."""
        self._keep_if_damaged()
        self.results_file.unlink(missing_ok=True)

    def _keep_if_damaged(self) -> None:
        problem = self.results_problem()
        if problem:
            backup = keep_damaged(self.results_file)
            log.warning("%s; replaced, the old bytes kept in %s", problem, backup)


RESULT_STATUSES = ("completed", "failed")


def results_shape(data: Any) -> str | None:
    """What is wrong with a loaded ``results.json`` (None: nothing): a mapping whose status is
    completed or failed, its metrics numbers."""
    if not isinstance(data, dict):
        return f"expected a JSON object, found {type(data).__name__}"
    if data.get("status") not in RESULT_STATUSES:
        return f"status must be {' or '.join(RESULT_STATUSES)}, found {data.get('status')!r}"
    for key, value in data.items():
        if "/" in key and value is not None and not isinstance(value, (int, float)):
            return f"{key} must be a number, found {value!r}"
    return None


def _resolved(data: dict[str, Any]) -> dict[str, Any]:
    """Hydra's record with its interpolations (``n_heads: ${heads}``) resolved, as they were when
    the run was composed; as written when one cannot be (its resolver is not registered here)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        resolved = OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    except (OmegaConfBaseException, ValueError):
        return data
    return resolved if isinstance(resolved, dict) else data


def marked_dirs(root: Path) -> set[Path]:
    """Every dir below ``root`` that holds a run's mark (Hydra's record, results, a checkpoint),
    following symlinked dirs, each real dir once: a study folder of links to runs is a sweep."""
    found, seen = set(), set()
    for here, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(here)
        if real in seen:  # a link loop, or a run linked twice: walk it once
            dirs.clear()
            continue
        seen.add(real)
        dirs.sort()  # by name, so which of two links to one run is kept does not vary
        if {HYDRA, RESULTS, CHECKPOINT} & {*dirs, *files}:
            found.add(Path(here))
    return found


def find_runs(
    target: Path | str, need_checkpoint: bool = False, what: str = "folder"
) -> list[RunDir]:
    """The run dir itself, else every outermost run below a sweep dir (sorted by path)."""
    root = RunDir.open(target, what)
    if root.is_run() and (root.has_checkpoint() or not need_checkpoint):
        return [root]
    marks = marked_dirs(root.path)
    runs = sorted(RunDir(d) for d in marks if d != root.path and RunDir(d).is_run())
    runs = [r for r in runs if not any(o.path in r.path.parents for o in runs)]
    for r in runs:  # a job dir renamed by hand: refused by name, not read as damaged later
        user_path(f"run dir in {str(root.path)!r}:", r.path.relative_to(root.path))
    if need_checkpoint:
        runs = [r for r in runs if r.has_checkpoint()]
    if not runs:
        if need_checkpoint:
            raise PosexpError(
                f"no checkpoint in {str(root.path)!r} (expected {CHECKPOINT}/meta.json, "
                f"or a sweep dir of runs)"
            )
        raise PosexpError(
            f"no runs in {str(root.path)!r} (expected a run dir or a sweep dir of runs)"
        )
    return runs


def latest_run(root: Path | str = "outputs") -> RunDir:
    """The run under ``root`` whose checkpoint was written last."""
    metas = list(Path(root).glob(f"**/{CHECKPOINT}/meta.json"))
    if not metas:
        raise PosexpError(
            f"no trained run under {str(root)!r}; train one with `posexp train` or pass --run"
        )
    newest = max(metas, key=os.path.getmtime).parent.parent
    return RunDir(user_path(f"the newest run under {str(root)!r},", newest))
