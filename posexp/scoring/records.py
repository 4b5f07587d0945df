"""Evaluation records: one typed record per measured cell, its key, and where records are kept.

A record holds the method spec that asked for it as the parser made it (``MethodSpec``: the
method's name, the settings given, a fixed factor, whether it is a fine-tune's baked-in
extension); JSON keeps those as fields (``method``, ``spec``, ``baked``) beside every setting at
its effective value (``settings``) and the factor it ran at; its ``label`` is for display and
never read back. Every record is checked where it is read (``Record.from_dict``: types, ranges,
the method and its known settings); a bad one is set aside, named once, never shown as measured.

A record is keyed by everything that changes its value: the spec asked, all the settings, the
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posexp import checks
from posexp.errors import PosexpError, UnreadableFile
from posexp.extension.registry import get_extension, method_params
from posexp.extension.spec import MethodSpec
from posexp.scoring.record_fields import (
    MAX_LENGTH,
    PRECISIONS,
    record_spec,
    record_value,
)
from posexp.scoring.registry import SCORERS
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
    def from_dict(cls, data: Any, where: str) -> Checkpoint:
        """From JSON; every record names the weights it scored."""
        if data is None:
            raise PosexpError(
                f"{where}.checkpoint is missing: a record names the weights it scored (a run "
                "evaluated before posexp 0.1.0 must be evaluated again)"
            )
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
CELL_FIELDS = ("method", "label", "length", "protocol", "factor")
KEY_EXTRA = ("stride", "sample_size", "depth", "task", "precision")
RUN_FIELDS = ("note", "seconds", "compile_seconds", "scored_at")


@dataclass
class Record:
    """One measured cell: what was asked (the key), what the scorer measured, how long it took.

    ``spec`` is the method spec that asked for it, as the parser made it (a fine-tune's baked
    extension: ``spec.baked``); ``settings`` every setting at its effective value and
    ``factor`` the s it ran at. JSON keeps them as fields (``method``, ``baked``, ``spec``,
    ``settings``, ``factor``); its ``label`` is for display only, never read back.
    """

    spec: MethodSpec
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
    def method(self) -> str:
        """The method's name (a fine-tune's baked-in one for a baked record)."""
        return self.spec.name

    @property
    def label(self) -> str:
        """The spec's display label (``baked:`` before a fine-tune's own)."""
        return self.spec.label

    @property
    def cell(self) -> tuple:
        """What the record measured, whatever spec asked for it: the method, its effective
        settings and factor and the rest of the key (two specs can name one cell)."""
        settings = tuple(sorted((k, repr(v)) for k, v in self.settings.items()))
        return (
            self.spec.name,
            self.spec.baked,
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

    @property
    def key(self) -> tuple:
        """Everything that changes the record's value (two records with one key are one cell),
        and the spec that asked, so a spec's row never takes another spec's cell."""
        return (self.spec.key, *self.cell)

    def to_dict(self) -> dict[str, Any]:
        """As JSON stores it: the cell, the metric and the scorer's values, then the rest."""
        return {
            "method": self.spec.name,
            "label": self.spec.label,
            "baked": self.spec.baked,
            "spec": {"settings": dict(self.spec.settings), "factor": self.spec.factor},
            **{f: getattr(self, f) for f in CELL_FIELDS[2:]},
            "metric": self.metric,
            **self.values,
            "note": self.note,
            **{f: getattr(self, f) for f in KEY_EXTRA},
            "settings": dict(self.settings),
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_dict(),
            **{f: getattr(self, f) for f in RUN_FIELDS[1:]},
        }

    def view(self) -> dict[str, Any]:
        """As the tables and plots of one run read it: ``to_dict`` with ``method`` the display
        label (the series a row or curve stands for), ``name`` the method's name and ``order``
        the spec's sort key."""
        return {
            **self.to_dict(),
            "method": self.label,
            "name": self.method,
            "order": self.spec.sort_key,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "record") -> Record:
        """From JSON, every field checked (types, ranges, the method's known settings): a
        damaged record is one line naming the bad field."""
        d = checks.mapping(where, data)
        method, protocol = d.get("method"), d.get("protocol")
        for name, value in (("method", method), ("protocol", protocol)):
            if not isinstance(value, str) or not value:
                raise PosexpError(f"{where}.{name} must be a non-empty string, got {value!r}")
        metric = d.get("metric") or "ppl"
        if not isinstance(metric, str):
            raise PosexpError(f"{where}.metric must be a string, got {metric!r}")
        spec = record_spec(d, where)
        known = {*CELL_FIELDS, *KEY_EXTRA, *RUN_FIELDS, "metric", "settings", "checkpoint"}
        declared = SCORERS[protocol].fields if protocol in SCORERS else ()
        lists = SCORERS[protocol].lists if protocol in SCORERS else ()
        values = {
            k: record_value(f"{where}.{k}", k, v, declared, lists)
            for k, v in d.items()
            if k not in {*known, "baked", "spec"}
        }
        depth = checks.number(f"{where}.depth", d.get("depth"), "in [0, 1]", allow_none=True)
        note = d.get("note") or ""
        if not isinstance(note, str):
            raise PosexpError(f"{where}.note must be a string, got {note!r}")
        precision = d.get("precision")
        if precision is not None:
            checks.choice(f"{where}.precision", precision, PRECISIONS)
        task = d.get("task")
        if task is not None and not isinstance(task, str):
            raise PosexpError(f"{where}.task must be a string or null, got {task!r}")
        try:
            settings = method_params(
                get_extension(spec.name),
                checks.mapping(f"{where}.settings", d.get("settings")),
                f"{where}.settings.",
            )
        except PosexpError as e:
            text = str(e)
            raise PosexpError(text if text.startswith(where) else f"{where}: {text}") from None
        return cls(
            spec=spec,
            length=checks.integer(f"{where}.length", d.get("length"), low=1, high=MAX_LENGTH),
            protocol=protocol,
            factor=checks.number(f"{where}.factor", d.get("factor", 1.0), ">= 1"),
            settings=settings,
            stride=checks.integer(
                f"{where}.stride", d.get("stride"), low=1, high=MAX_LENGTH, allow_none=True
            ),
            sample_size=checks.positive_int(
                f"{where}.sample_size", d.get("sample_size"), allow_none=True
            ),
            depth=depth,
            task=task,
            precision=precision,
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
    """The records of ``eval/<name>`` ([] when there is none) and how many were set aside.

    Each record is checked (types, ranges, the method's known settings): a bad one is set
    aside, named once in a one-line warning, never shown as measured, and the others go on (a
    writer keeps the file as .bak). A file that is not a list of records is one line naming it
    (``skip_damaged`` is accepted for the callers that rescore it under --force).
    """
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
            bad.append(str(e))
    if bad:
        say_once(
            path,
            f"{path}: set aside {len(bad)} damaged record(s) of {len(data)}, not shown as "
            f"measured ({bad[0]}{', ...' if len(bad) > 1 else ''}); the file is kept as "
            f"{name}.bak when next written",
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
    stale: list[Record]  # of earlier checkpoints
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
    """The records of the run's current weights as the views read them (``Record.view``);
    None when it has none. A damaged file is one line (``PosexpError``); a damaged record is
    set aside with a warning."""
    if not run.has_checkpoint():
        return None
    recs = load(run).current
    return [r.view() for r in recs] or None
