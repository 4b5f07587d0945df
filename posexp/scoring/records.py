"""Evaluation records: one typed record per measured cell, its key, and where records are kept.

A record is keyed by everything that changes its value: the method and all its settings, the
factor, the length, the protocol, the stride (sliding windows), the sample size (test targets
of a language model, instances per size of a task), the key depth, the mixture's task, the
precision, and the checkpoint it scored (its step and a hash of its weights). In
``<run>/eval/``:

* ``extrapolate.json``: the records of the weights they were scored on, every evaluation's
  cells together (a new evaluation adds its cells; ``--force`` replaces the cells it scores);
* ``stale.json``: records of earlier weights (the run trained on since), kept apart, never in a
  table, plot or report.

Writers merge under ``<run>/.eval.lock`` (an exclusive ``flock``, held while the files are
swapped in), so two evaluations of one run at once keep each other's records.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posexp import checks
from posexp.errors import PosexpError, UnreadableFile
from posexp.store.files import exclusive_lock
from posexp.store.rundir import EVAL, RunDir

log = logging.getLogger("posexp")

RECORDS = "extrapolate.json"
STALE = "stale.json"
EVAL_LOCK = ".eval.lock"


@dataclass(frozen=True)
class Checkpoint:
    """Which weights a record scored: the checkpoint's step and the start of their sha256."""

    step: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        """As JSON stores it."""
        return {"step": self.step, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Checkpoint | None:
        """From JSON (None: a record written before records named their checkpoint)."""
        if data is None:
            return None
        d = checks.mapping(f"{where}.checkpoint", data)
        step = checks.integer(f"{where}.checkpoint.step", d.get("step"), low=0)
        sha = d.get("sha256")
        if not isinstance(sha, str) or not sha:
            raise PosexpError(f"{where}.checkpoint.sha256 must be a hex string, got {sha!r}")
        return cls(step, sha)

    def __str__(self) -> str:
        return f"step {self.step} (weights {self.sha256[:8]})"


def checkpoint_of(run: RunDir) -> Checkpoint:
    """The run's current checkpoint: its step and the sha256 of its weights (first 16 digits)."""
    from posexp.store.checkpoint import checkpoint_dir

    digest = hashlib.sha256()
    path = checkpoint_dir(run.path) / "model.safetensors"
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:  # deleted to save space, a partial copy: named, run by run
        raise UnreadableFile(path, "missing: the checkpoint has no weights") from None
    return Checkpoint(int(run.meta()["step"]), digest.hexdigest()[:16])


# What a record holds besides the scorer's values, in the order JSON and CSV write them.
CELL_FIELDS = ("method", "length", "protocol", "factor")
KEY_EXTRA = ("stride", "sample_size", "depth", "task", "precision")
RUN_FIELDS = ("note", "seconds", "compile_seconds", "scored_at")


@dataclass
class Record:
    """One measured cell: what was asked (the key), what the scorer measured, how long it took."""

    method: str  # label: the method's name with its non-default settings, baked:<name>
    length: int
    protocol: str
    factor: float
    settings: dict[str, Any] = field(default_factory=dict)  # every setting, effective value
    stride: int | None = None
    sample_size: int | None = None  # test targets asked for (text), instances per size (task)
    depth: float | None = None
    task: str | None = None  # the part of a task mixture (data=ruler) the cell scores
    precision: str | None = None
    checkpoint: Checkpoint | None = None
    metric: str = "ppl"
    values: dict[str, Any] = field(default_factory=dict)  # the scorer's fields
    note: str = ""
    seconds: float = 0.0
    compile_seconds: float | None = None
    scored_at: str | None = None

    @property
    def key(self) -> tuple:
        """Everything that changes the record's value (two records with one key are one cell);
        the label too, so a spec's row never takes another spec's cell."""
        settings = tuple(sorted((k, repr(v)) for k, v in self.settings.items()))
        return (
            self.method,
            settings,
            float(self.factor),
            self.length,
            self.protocol,
            self.stride,
            self.sample_size,
            self.depth,
            self.task,
            self.precision,
            self.checkpoint,
        )

    def to_dict(self) -> dict[str, Any]:
        """As JSON stores it: the cell, the metric and the scorer's values, then the rest."""
        return {
            **{f: getattr(self, f) for f in CELL_FIELDS},
            "metric": self.metric,
            **self.values,
            "note": self.note,
            **{f: getattr(self, f) for f in KEY_EXTRA},
            "settings": dict(self.settings),
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_dict(),
            **{f: getattr(self, f) for f in RUN_FIELDS[1:]},
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "record") -> Record:
        """From JSON, every field checked: a damaged file is one line naming the bad field."""
        d = checks.mapping(where, data)
        method, protocol = d.get("method"), d.get("protocol")
        for name, value in (("method", method), ("protocol", protocol)):
            if not isinstance(value, str) or not value:
                raise PosexpError(f"{where}.{name} must be a non-empty string, got {value!r}")
        metric = d.get("metric") or "ppl"
        if not isinstance(metric, str):
            raise PosexpError(f"{where}.metric must be a string, got {metric!r}")
        known = {*CELL_FIELDS, *KEY_EXTRA, *RUN_FIELDS, "metric", "settings", "checkpoint"}
        values = {k: v for k, v in d.items() if k not in known}
        for k, v in values.items():
            if v is not None and not isinstance(v, (int, float, list)):
                raise PosexpError(f"{where}.{k} must be a number, a list or null, got {v!r}")
        if values.get(metric) is not None and not math.isfinite(values[metric]) and metric != "ppl":
            raise PosexpError(f"{where}.{metric} must be finite, got {values[metric]!r}")
        depth = checks.number(f"{where}.depth", d.get("depth"), "in [0, 1]", allow_none=True)
        note = d.get("note") or ""
        if not isinstance(note, str):
            raise PosexpError(f"{where}.note must be a string, got {note!r}")
        return cls(
            method=method,
            length=checks.positive_int(f"{where}.length", d.get("length")),
            protocol=protocol,
            factor=checks.number(f"{where}.factor", d.get("factor", 1.0), ">= 1"),
            settings=checks.mapping(f"{where}.settings", d.get("settings")),
            stride=checks.positive_int(f"{where}.stride", d.get("stride"), allow_none=True),
            sample_size=checks.positive_int(
                f"{where}.sample_size", d.get("sample_size"), allow_none=True
            ),
            depth=depth,
            task=d.get("task") if isinstance(d.get("task"), str) else None,
            precision=d.get("precision") if isinstance(d.get("precision"), str) else None,
            checkpoint=Checkpoint.from_dict(d.get("checkpoint"), where),
            metric=metric,
            values=values,
            note=note,
            seconds=checks.number(f"{where}.seconds", d.get("seconds") or 0.0, ">= 0"),
            compile_seconds=checks.number(
                f"{where}.compile_seconds", d.get("compile_seconds"), ">= 0", allow_none=True
            ),
            scored_at=d.get("scored_at") if isinstance(d.get("scored_at"), str) else None,
        )


# ---- where records are kept -----------------------------------------------------------------


REMEDY = "move it aside, or rescore its cells with --force"
_SAID: set[tuple[str, int]] = set()  # damaged files already warned of, by path and mtime


def read_file(run: RunDir, name: str, skip_damaged: bool = False) -> tuple[list[Record], int]:
    """The records of ``eval/<name>`` ([] when there is none) and how many were left out:
    none, since a damaged file or record is one line naming the file, unless ``skip_damaged``
    (--force), which leaves out only the records that cannot be read, with a warning."""
    from posexp.store.files import read_json, staged_current

    path = staged_current(run.path / EVAL) / name

    def shape(data: Any) -> str | None:
        return None if isinstance(data, list) else "expected a list of records"

    try:
        data = read_json(path, shape)
    except UnreadableFile as e:
        raise UnreadableFile(path, f"{e.reason}; {REMEDY}") from None
    records, bad = [], []
    for i, row in enumerate(data or []):
        try:
            records.append(Record.from_dict(row, f"record {i + 1}"))
        except PosexpError as e:
            if not skip_damaged:
                raise UnreadableFile(path, f"{e}; {REMEDY}") from None
            bad.append(str(e))
    if bad:
        say_once(
            path,
            f"{path}: left out {len(bad)} damaged record(s) of {len(data)} ({bad[0]}"
            f"{', ...' if len(bad) > 1 else ''}); the file is kept as {name}.bak",
        )
    return records, len(bad)


def say_once(path: Path, warning: str) -> None:
    """Warn of a damaged file once per version of it: a plan and its merge both read it."""
    key = (str(path), path.stat().st_mtime_ns if path.exists() else 0)
    if key not in _SAID:
        _SAID.add(key)
        log.warning("%s", warning)


@dataclass
class Stored:
    """A run's records as stored, split by the weights they scored."""

    current: list[Record]  # of the run's current checkpoint
    stale: list[Record]  # of earlier checkpoints (or of none named: written by an older posexp)
    checkpoint: Checkpoint
    damaged: list[str] = field(default_factory=list)  # files read in part (force): kept as .bak
    superseded: int = 0  # records in extrapolate.json of earlier weights: moved to stale.json

    def measured(self) -> dict[tuple, Record]:
        """The current records by key."""
        return {r.key: r for r in self.current}


def load(run: RunDir, checkpoint: Checkpoint | None = None, force: bool = False) -> Stored:
    """The run's stored records against its current checkpoint (``checkpoint``, else read).

    ``force``: a damaged file's readable records are kept, the rest count as unmeasured (a
    file that does not parse: all of them), and the file is kept as .bak when replaced.
    """
    checkpoint = checkpoint or checkpoint_of(run)
    records: list[Record] = []
    damaged = []
    superseded = 0
    for name in (RECORDS, STALE):
        try:
            read, left_out = read_file(run, name, skip_damaged=force)
        except PosexpError as e:
            if not force:
                raise
            say_once(
                Path(getattr(e, "path", name)), f"{e}; under --force its cells count as unmeasured"
            )
            damaged.append(name)
            continue
        if left_out:
            damaged.append(name)
        records += read
        if name == RECORDS:
            superseded = sum(r.checkpoint != checkpoint for r in read)
    current = [r for r in records if r.checkpoint == checkpoint]
    stale = [r for r in records if r.checkpoint != checkpoint]
    return Stored(current, stale, checkpoint, damaged, superseded)


def merged(stored: Stored, new: list[Record]) -> list[Record]:
    """The current records with ``new`` added, a new record replacing a stored one of its key;
    the order: stored cells first, in their order, then the new ones."""
    by_key = {r.key: r for r in stored.current}
    for r in new:
        by_key[r.key] = r
    return list(by_key.values())


@contextlib.contextmanager
def merging(run: RunDir) -> Iterator[None]:
    """Hold the run's eval lock (waiting for another evaluation's merge to end)."""
    with exclusive_lock(run.path / EVAL_LOCK):
        yield


def current_records(run: RunDir) -> list[dict[str, Any]] | None:
    """The records of the run's current weights as plain dicts (what reports read); None when
    it has none. A damaged file is one line (``PosexpError``)."""
    if not run.has_checkpoint():
        return None
    recs = load(run).current
    return [r.to_dict() for r in recs] or None
