"""`posexp runs`: one table of every run under a folder (single runs and sweep jobs alike).

Each row comes from the run dir's own files (checkpoint meta, config, results.json,
provenance.json, eval/extrapolate.json), so it works for finished, failed, unfinished and
resumed runs.
"""

from __future__ import annotations

import os
import platform
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from posexp.checks import user_path
from posexp.commands.report.jobs import Job, find_jobs
from posexp.commands.report.views.findings import job_pe
from posexp.errors import PosexpError, UnreadableFile
from posexp.results.labels import extension_text
from posexp.store import provenance, runlock
from posexp.store.rundir import RunDir, marked_dirs

FIELDS = (
    "run",
    "data",
    "model",
    "seq_len",
    "pe",
    "pe_label",
    "heads",
    "extension",
    "factor",
    "seed",
    "parent",
    "step",
    "max_steps",
    "status",
    "val_ppl",
    "val_acc",
    "bleu",
    "evaluated",
    "minutes",
    "started",
    "unreadable",
)
# The table's columns: (header, record keys). Steps show as step/max_steps, the extension with
# its factor; `started` only in the JSON and the sort order.
COLUMNS = (
    ("run", ("run",)),
    ("data", ("data",)),
    ("model", ("model",)),
    ("seq", ("seq_len",)),
    ("pe", ("pe_label",)),
    ("h", ("heads",)),
    ("ext", ("extension", "factor")),
    ("seed", ("seed",)),
    ("parent", ("parent",)),
    ("steps", ("step", "max_steps")),
    ("status", ("status",)),
    ("val ppl", ("val_ppl",)),
    ("val acc", ("val_acc",)),
    ("BLEU", ("bleu",)),
    ("evaluated", ("evaluated",)),
    ("min", ("minutes",)),
)
NUMERIC = {"seq", "h", "seed", "steps", "val ppl", "val acc", "BLEU", "min"}
DIGITS = {"val ppl": 2, "val acc": 3, "BLEU": 2, "min": 1}
# Hidden unless --wide when every row has nothing to show in them.
OPTIONAL = {"val acc", "BLEU", "ext", "parent", "evaluated"}
# Left out, in this order, while the table is wider than the terminal (unless --wide): first
# the settings while the names do not fit whole, then what only some runs have while they do
# not fit in NAME_READABLE characters (a sweep job's settings whole: `…/pe=alibi,seed=0`); the
# names then lose their date and are shortened in the middle to fit, never below
# RUN_MIN_WIDTH. The run name, pe, heads, extension, steps, status and val ppl always stay.
DROP_FIRST = ("min", "seq", "model", "data", "seed")
DROP_THEN = ("evaluated", "BLEU", "val acc", "parent")
NAME_READABLE = 20
# Results: kept as columns even where every run has the same (most often by chance).
RESULTS_SHOWN = {"val ppl", "val acc", "BLEU", "evaluated", "min"}
# Names that are shortened in the middle (never folded onto more lines) to fit the terminal.
NAMES = ("run", "parent")
RUN_MIN_WIDTH = 12
# What a name loses first when the table is too wide: `runs/` and the date of its start time.
DATE_PREFIX = re.compile(r"^(runs/)?\d{4}-\d{2}-\d{2}_|(?<=^sweeps/)\d{4}-\d{2}-\d{2}_")


def _sessions(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The run's sessions, and why they cannot be read ([] and the reason for a damaged record)."""
    try:
        return provenance.sessions(path), None
    except UnreadableFile as e:
        return [], str(e)


def _minutes(sessions: list[dict[str, Any]]) -> float | None:
    """Wall minutes over the run's training sessions, None if unknown."""
    if not sessions:
        return None
    try:
        total = sum(
            (
                datetime.fromisoformat(s["ended"]) - datetime.fromisoformat(s["started"])
            ).total_seconds()
            for s in sessions
            if s.get("ended")
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return round(total / 60, 1)


def _started(sessions: list[dict[str, Any]]) -> str | None:
    """When the run's first training session started (ISO time), None if unknown."""
    first = sessions[0] if sessions else {}
    return first.get("started") if isinstance(first, dict) else None


def _parent(job: Job, root: Path) -> str | None:
    """A fine-tune's parent run dir: relative to ``root`` when inside it, else as recorded."""
    parent = job.config.parent if job.config else None
    if parent in (None, "", "None"):
        return None
    try:  # recorded as given to --run: relative to where finetune ran, like ``root`` here
        return str(Path(str(parent)).resolve().relative_to(root.resolve()))
    except (ValueError, OSError):
        return str(parent)


def _evaluated(job: Job) -> dict[str, Any] | None:
    """What eval-extrapolate recorded for the run's current weights: its method labels, the
    longest length and the number of cells; None when nothing (a damaged file: ``unreadable``)."""
    records = job.evaluation[0]
    if not records:
        return None
    return {
        "methods": list(dict.fromkeys(str(r["method"]) for r in records)),
        "longest": max(int(r["length"]) for r in records),
        "cells": len(records),
    }


def live_status(job: Job) -> str:
    """The job's status, an unfinished one told apart by its lock: ``running`` while a process
    holds it, ``stopped`` when none does and the last holder ran on this host (a kill, a crash,
    Ctrl-C: resume it); ``unfinished`` when that cannot be known (another node's run)."""
    if job.status != "unfinished":
        return job.status
    if job.run.holder() is not None:
        return "running"
    try:
        last = (job.path / runlock.OWNER).read_text().strip()
    except OSError:
        return "unfinished"
    return "stopped" if last.endswith(f"@{platform.node()}") else "unfinished"


def run_row(job: Job, root: Path) -> dict[str, Any]:
    """One run as a flat, typed record."""
    cfg, meta, metrics = job.config, job.meta or {}, job.metrics
    model = meta.get("model") or {}
    ext = model.get("extension") or (cfg.extension.to_dict() if cfg else {})
    method = ext.get("method", "none")
    sessions, damaged = _sessions(job.path)  # provenance.json, read once
    broken, evaluation = job.checkpoint_problem, job.evaluation[1]
    if broken and evaluation and "model.safetensors" in evaluation:
        evaluation = None  # the same missing weights, said once
    problems = (job.run.results_problem(), damaged, broken, evaluation)
    unreadable = [p for p in problems if p]
    return {
        "run": str(job.path.relative_to(root)) if job.path != root else job.path.name,
        # A synthetic run is named by its task (synthetic:copy).
        "data": (
            f"{cfg.data.name}:{cfg.data.params['task']}"
            if "task" in cfg.data.params
            else cfg.data.name
        )
        if cfg
        else None,
        "model": cfg.model.name if cfg else None,
        "seq_len": cfg.train.seq_len if cfg else None,
        "pe": job.pe,
        # How reports name it: a layered run by its pattern, PaTH with a forget gate as PaTH-FoX.
        "pe_label": job_pe(job).label,
        "heads": model.get("n_heads", cfg.heads if cfg else None),
        "extension": method,
        "factor": None if method == "none" else ext.get("factor"),
        "seed": cfg.seed if cfg else None,
        "parent": _parent(job, root),
        "step": meta.get("step"),
        "max_steps": cfg.train.max_steps if cfg else None,
        "status": live_status(job),
        "val_ppl": metrics.get("final/val_ppl"),
        "val_acc": metrics.get("final/val_accuracy"),
        "bleu": metrics.get("final/bleu"),
        "evaluated": _evaluated(job),
        "minutes": _minutes(sessions),
        "started": _started(sessions),
        "unreadable": unreadable,  # files of the run that could not be read, each in one line
    }


DEFAULT_ROOT = "outputs"


def list_runs(root: Path | str = Path(DEFAULT_ROOT)) -> list[dict[str, Any]]:
    """Every run under ``root``, oldest first (by its first session's start; a run without a
    provenance record by its dir's time), so evaluating a run never moves it."""
    root = user_path("runs: FOLDER", root)
    if root.is_file():
        raise PosexpError(
            f"runs: {str(root)!r} is a file, not a folder; pass a run dir or a folder "
            f"of runs (default: outputs)"
        )
    if not root.is_dir():
        if root == Path(DEFAULT_ROOT):  # nothing trained here yet: no runs, not an error
            return []
        raise PosexpError(
            f"runs: no such directory {str(root)!r} (train a run first, or pass a folder)"
        )
    if not RunDir(root).is_run() and not marked_dirs(root):
        inside = next((p for p in root.resolve().parents if RunDir(p).is_run()), None)
        if inside is not None:  # e.g. a run's checkpoint/ or eval/ folder
            raise PosexpError(
                f"runs: {str(root)!r} is a folder inside the run dir {str(inside)!r}; pass that"
            )
        return []  # a folder without runs yet: an empty list (scripts read `[]`), not an error
    rows = [(run_row(j, root), j) for j in find_jobs(root)]

    def when(item: tuple[dict[str, Any], Job]) -> float:
        row, job = item
        try:
            return datetime.fromisoformat(row["started"]).timestamp()
        except (TypeError, ValueError):
            return job.path.stat().st_mtime

    return [row for row, _ in sorted(rows, key=when)]


def _text(header: str, row: dict[str, Any], keys: tuple[str, ...]) -> str:
    """One cell as the table shows it ('–' for nothing)."""
    values = [row.get(k) for k in keys]
    if header == "steps":
        step, total = values
        return f"{'–' if step is None else step}/{'?' if total is None else total}"
    if header == "ext":
        return "–" if values[0] is None else extension_text(*values)
    if header == "evaluated" and values[0] is not None:
        done = values[0]
        count = len(done["methods"])
        return f"{count} method{'s' if count != 1 else ''} ≤{done['longest']}"
    if header == "evaluated" and _eval_unreadable(row):
        return "unreadable"  # named under the table
    (v, *_) = values
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{DIGITS.get(header, 2)}f}"
    return str(v)


def shorten_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: its start and its end with an ellipsis between.
    The end names a sweep's job: its last path part is kept whole where it fits, else two thirds
    of the width go to the end."""
    if len(text) <= width:
        return text
    if width < 3:
        return text[:width]
    last = text[text.rfind("/") :] if "/" in text else ""
    tail = len(last) if last and len(last) + 2 <= width else width - 1 - (width - 1) // 3
    return text[: width - 1 - tail] + "…" + text[len(text) - tail :]


def _same_text(header: str, value: str) -> str:
    """A column equal in every row, as the line under the table names it."""
    return f"no {header}" if value == "–" else f"{header} {value}"


def _console(wide: bool) -> Any:
    """The terminal's console; piped or logged, a 120-column one (200 for ``wide``) unless
    COLUMNS says a width."""
    from posexp.commands.console import stdout_console

    if not os.environ.get("COLUMNS", "").isdigit():
        return stdout_console(width=200 if wide else 120)  # do not squeeze a log to 80 columns
    return stdout_console()


def print_runs(rows: list[dict[str, Any]], console: Any = None, wide: bool = False) -> None:
    """The rows as a terminal table that fits the terminal: long names are shortened in the
    middle; columns empty in every row, or equal in every row (named once under the table),
    are left out unless ``wide``."""
    from rich import box
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = console or _console(wide)
    if not rows:
        console.print("no runs yet (train one with `posexp train`)", highlight=False, markup=False)
        return
    columns = [
        (h, keys)
        for h, keys in COLUMNS
        if wide or h not in OPTIONAL or any(_shown(h, r, keys) for r in rows)
    ]
    texts = {h: [_text(h, r, keys) for r in rows] for h, keys in columns}
    same = []
    if not wide and len(rows) > 1:
        same = [
            h
            for h, _ in columns
            if h != "run" and h not in RESULTS_SHOWN and len(set(texts[h])) == 1
        ]
        columns = [(h, k) for h, k in columns if h not in same]
    hidden: list[str] = []
    if not wide:
        for drop, cap in ((DROP_FIRST, None), (DROP_THEN, NAME_READABLE)):
            for header in drop:
                if _table_width(texts, [h for h, _ in columns], cap) <= console.width:
                    break
                if header in (h for h, _ in columns):
                    columns = [(h, k) for h, k in columns if h != header]
                    hidden.append(header)
        if _fit_names(texts, [h for h, _ in columns], console.width):
            hidden.append("the date in names")
    # No edges: the box's top edge is a line of spaces, a blank first line in a pipe or a file.
    # Its other edges (a space each side, a blank line under the rows) become padding, so the
    # table is laid out and shown as before.
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, show_edge=False)
    for header, _ in columns:
        # Should the table still be too wide, rich narrows the names, never a number or status.
        whole = max(len(header), *(len(t) for t in texts[header])) if header not in NAMES else 0
        table.add_column(
            header,
            justify="right" if header in NUMERIC else "left",
            no_wrap=True,
            min_width=whole or None,
        )
    for i in range(len(rows)):
        # Text, not markup: run names may hold brackets (a sweep over data.files=[a.txt]).
        table.add_row(*(Text(texts[h][i]) for h, _ in columns))
    console.print(Padding(table, (0, 1, 1, 1), expand=False))
    if same:
        shown = ", ".join(_same_text(h, texts[h][0]) for h in same)
        console.print(f"same in every run: {shown}", highlight=False, markup=False)
    if hidden:
        console.print(
            f"(hidden at this width: {', '.join(hidden)}; --wide shows every column)",
            highlight=False,
            markup=False,
        )
    for row in rows:  # named under the table: a damaged file is never a silent blank
        for problem in row.get("unreadable") or ():
            console.print(f"{row['run']}: {problem}", highlight=False, markup=False, soft_wrap=True)


def _fit_names(texts: dict[str, list[str]], headers: list[str], width: int) -> bool:
    """Fit the names (run, parent) to ``width``: first without the run's date (``runs/`` and
    ``2026-12-04_`` go, the time of day and the job stay), then shortened in the middle, to one
    cap for both, never below RUN_MIN_WIDTH. True if the dates were left out."""
    names = [h for h in NAMES if h in headers]
    dated = _table_width(texts, headers) > width
    if dated:
        for h in names:
            texts[h] = [DATE_PREFIX.sub("", t) for t in texts[h]]
    longest = max(len(t) for h in names for t in texts[h])
    cap = longest
    while cap > RUN_MIN_WIDTH and _table_width(texts, headers, cap) > width:
        cap -= 1
    for h in names:
        texts[h] = [shorten_middle(t, cap) for t in texts[h]]
    return dated


def _table_width(texts: dict[str, list[str]], headers: list[str], cap: int | None = None) -> int:
    """The table's width with these columns: each at its widest cell (the names cut to ``cap``),
    three characters between columns (padding, the box's gap, padding) and one at each edge."""
    widths = [
        max([len(h), *(min(len(t), cap or len(t)) if h in NAMES else len(t) for t in texts[h])])
        for h in headers
    ]
    return sum(widths) + 3 * (len(widths) - 1) + 2


def _shown(header: str, row: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Whether a cell has something to show (an extension other than none, a number, records
    that cannot be read)."""
    value = row.get(keys[0])
    return value not in (None, "none") or (header == "evaluated" and _eval_unreadable(row))


def _eval_unreadable(row: dict[str, Any]) -> bool:
    """Whether the run's evaluation records are among its files that cannot be read."""
    from posexp.scoring.records import RECORDS, STALE

    return any(RECORDS in p or STALE in p for p in row.get("unreadable") or ())
