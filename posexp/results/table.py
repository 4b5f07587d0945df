"""Every stored evaluation of a set of runs as one tidy results table, one measured value a row.

``load_results(runs)`` reads the current records (``<run>/eval/extrapolate.json``, those of
the run's present weights: never ``stale.json``, never a record set aside as damaged) of every
run given (a run dir, a sweep's jobs, any mix) into one ``pandas.DataFrame``. Each record gives
one row per value it measured (``ppl``, ``loss``, ``accuracy``, ``score``: whichever its scorer
wrote); counts (``tokens``, ``examples``) and per-position lists are not rows.

Columns, in this order:

=================  ==========================================================================
``run``            str: the run dir's path
``pe``             str: the positional encoding's registered name
``seed``           int or None: the run's seed
``parent``         str or None: the run a fine-tune started from
``method``         str: the extension method's name (``none``, ``yarn``, ...)
``spec``           str: the method spec's display label (``yarn(factor=4)``, ``baked:yarn``)
``baked``          bool: the extension a fine-tune was trained with (not applied at evaluation)
``settings``       dict: every setting of the method at its effective value
``factor``         float: the factor s the cell ran at
``length``         int: the evaluation length (tokens; test size for a task run)
``x_l0``           float: length / l0 (a task run: the row's tokens / the longest training row)
``l0``             int: the length the run's positions were trained at (a fine-tune: its
                   parent's); a task run: its longest training row in tokens
``protocol``       str: the scorer (``nonoverlap``, ``sliding``, ``exact_match``, ...)
``stride``         int or None: sliding windows' stride
``sample_size``    int or None: test tokens asked for (text), instances per size (task)
``depth``          float or None: the key depth (passkey, needle tasks)
``task``           str or None: the part of a task mixture
``precision``      str or None: ``fp32`` or ``bf16``
``metric``         str: which value the row holds (``ppl``, ``loss``, ``accuracy``, ``score``)
``primary``        bool: the row holds the record's own metric (what its tables show)
``value``          float: the measured value (inf for a diverged model's ppl)
``scored_tokens``  int or None: the tokens the value was measured on
``checkpoint``     str: ``<step>:<sha256 prefix>`` of the weights scored
``set_<name>``     one column per setting seen in any row: its effective value (``Int64`` where
                   every value is an integer, ``float64`` where a number, else objects; missing
                   where the row's method has no such setting)
=================  ==========================================================================

A run with no records adds no rows; one whose records file is damaged is one line
(``PosexpError``), as everywhere records are read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from posexp.rundir import RunDir, find_runs
from posexp.scoring.record_fields import MEASURES
from posexp.scoring.records import Record, load

COLUMNS = (
    "run",
    "pe",
    "seed",
    "parent",
    "method",
    "spec",
    "baked",
    "settings",
    "factor",
    "length",
    "x_l0",
    "l0",
    "protocol",
    "stride",
    "sample_size",
    "depth",
    "task",
    "precision",
    "metric",
    "primary",
    "value",
    "scored_tokens",
    "checkpoint",
)
SETTING_PREFIX = "set_"


def load_results(runs: Iterable[RunDir | Path | str]) -> pd.DataFrame:
    """Every current evaluation record of ``runs`` as one long table (see the module's schema):
    each a run dir, or a sweep dir standing for every job below it; a run without a checkpoint
    or records adds nothing, a folder with no run is one line (``PosexpError``)."""
    rows: list[dict[str, Any]] = []
    for run in _runs(runs):
        if not run.has_checkpoint():
            continue
        records = load(run).current
        if records:
            rows += run_rows(run, records)
    return results_frame(rows)


def _runs(items: Iterable[RunDir | Path | str]) -> list[RunDir]:
    """Each item as run dirs: a run itself, else a sweep's jobs (each once, in order)."""
    out: dict[Path, RunDir] = {}
    for item in items:
        found = [item] if isinstance(item, RunDir) else find_runs(Path(item), what="run or sweep")
        out.update((run.path.resolve(), run) for run in found)
    return list(out.values())


def run_rows(run: RunDir, records: list[Record]) -> list[dict[str, Any]]:
    """The table's rows of one run's records (its facts read once)."""
    meta = run.meta()
    cfg = run.config()
    l0 = int(meta["model"]["train_length"])
    tokens_of = _task_rows(cfg)
    if tokens_of is not None:
        l0 = tokens_of[1]
    facts = {
        "run": str(run.path),
        "pe": str(meta["model"]["pe"]),
        "seed": cfg.seed,
        "parent": None if cfg.parent in (None, "") else str(cfg.parent),
    }
    rows = []
    for r in records:
        tokens = r.length if tokens_of is None else tokens_of[0](r.length)
        cell = {
            **facts,
            "method": r.method,
            "spec": r.label,
            "baked": r.spec.baked,
            "settings": dict(r.settings),
            "factor": float(r.factor),
            "length": r.length,
            "x_l0": tokens / l0,
            "l0": l0,
            "protocol": r.protocol,
            "stride": r.stride,
            "sample_size": r.sample_size,
            "depth": r.depth,
            "task": r.task,
            "precision": r.precision,
            "scored_tokens": r.values.get("tokens"),
            "checkpoint": ""
            if r.checkpoint is None
            else f"{r.checkpoint.step}:{r.checkpoint.sha256}",
        }
        for metric in (m for m in MEASURES if r.values.get(m) is not None):
            value = float(r.values[metric])
            if math.isnan(value):
                continue  # nothing was measured (a size with no instance)
            rows.append({**cell, "metric": metric, "primary": metric == r.metric, "value": value})
    return rows


def _task_rows(cfg: Any) -> tuple[Any, int] | None:
    """(a task run's row tokens per size, its longest training row), None for a text run."""
    if cfg.data.name != "synthetic":
        return None
    from posexp.data.synthetic import make_data

    task = make_data(**cfg.data.params)
    return task.task.row_tokens, int(task.longest_train_row())


def results_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """``rows`` as the table: the columns in order, then a ``set_<name>`` per setting seen."""
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    names = sorted({k for row in rows for k in row["settings"]})
    for name in names:
        values = [row["settings"].get(name) for row in rows]
        numeric = all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values
        ) and any(v is not None for v in values)
        column = pd.Series(values, index=frame.index, dtype=object)
        if numeric:
            whole = all(v is None or isinstance(v, int) for v in values)
            column = pd.to_numeric(column).astype("Int64" if whole else "float64")
        frame[SETTING_PREFIX + name] = column
    for name in ("seed", "stride", "sample_size", "scored_tokens"):
        frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    return frame
