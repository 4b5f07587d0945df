"""`posexp runs`: one table of every run under a folder (single runs and sweep jobs alike).

Each row comes from the run dir's own files (checkpoint meta, config, results.json,
provenance.json), so it works for finished, failed, unfinished and resumed runs.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from posexp.checkpoint import CHECKPOINT
from posexp.checks import user_path
from posexp.commands.report.jobs import Job, find_jobs
from posexp.errors import PosexpError, UnreadableFile
from posexp.rundir import HYDRA, RESULTS, RunDir
from posexp.runtime import provenance

FIELDS = (
    "run",
    "data",
    "model",
    "seq_len",
    "pe",
    "heads",
    "extension",
    "step",
    "max_steps",
    "status",
    "val_ppl",
    "val_acc",
    "bleu",
    "minutes",
    "started",
    "unreadable",
)
# The table's columns: (header, record keys). Steps show as step/max_steps; `started` only in
# the JSON and the sort order.
COLUMNS = (
    ("run", ("run",)),
    ("data", ("data",)),
    ("model", ("model",)),
    ("seq", ("seq_len",)),
    ("pe", ("pe",)),
    ("h", ("heads",)),
    ("ext", ("extension",)),
    ("steps", ("step", "max_steps")),
    ("status", ("status",)),
    ("val ppl", ("val_ppl",)),
    ("val acc", ("val_acc",)),
    ("BLEU", ("bleu",)),
    ("min", ("minutes",)),
)
NUMERIC = {"seq", "h", "steps", "val ppl", "val acc", "BLEU", "min"}
DIGITS = {"val ppl": 2, "val acc": 3, "BLEU": 2, "min": 1}
# Hidden unless --wide when every row has nothing to show in them.
OPTIONAL = {"val acc", "BLEU", "ext"}
# Left out, in this order, while the table is wider than the terminal (unless --wide); the run
# name, pe, heads, extension, steps, status and val ppl always stay.
DROP_FIRST = ("min", "seq", "model", "data", "BLEU", "val acc")
RUN_MIN_WIDTH = 12


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


def run_row(job: Job, root: Path) -> dict[str, Any]:
    """One run as a flat, typed record."""
    cfg, meta, metrics = job.config, job.meta or {}, job.metrics
    model = meta.get("model") or {}
    ext = model.get("extension") or (cfg.extension.to_dict() if cfg else {})
    sessions, damaged = _sessions(job.path)  # provenance.json, read once
    unreadable = [p for p in (job.run.results_problem(), damaged) if p]
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
        "heads": model.get("n_heads", cfg.heads if cfg else None),
        "extension": ext.get("method", "none"),
        "step": meta.get("step"),
        "max_steps": cfg.train.max_steps if cfg else None,
        "status": job.status,
        "val_ppl": metrics.get("final/val_ppl"),
        "val_acc": metrics.get("final/val_accuracy"),
        "bleu": metrics.get("final/bleu"),
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
    marks = (f"{CHECKPOINT}/meta.json", RESULTS, HYDRA)
    if not RunDir(root).is_run() and not any(any(root.rglob(m)) for m in marks):
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
    values = [row.get(k) for k in keys]
    if header == "steps":
        step, total = values
        return f"{'–' if step is None else step}/{'?' if total is None else total}"
    (v,) = values
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{DIGITS.get(header, 2)}f}"
    return str(v)


def print_runs(rows: list[dict[str, Any]], console: Any = None, wide: bool = False) -> None:
    """The rows as a terminal table that fits the terminal: the run name wraps, columns that are
    empty in every row are left out unless ``wide``."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    if not rows:
        (console or Console()).print("no runs yet (train one with `posexp train`)", highlight=False)
        return

    columns = [
        (h, keys)
        for h, keys in COLUMNS
        if wide or h not in OPTIONAL or any(_shown(h, r, keys) for r in rows)
    ]
    if console is None:
        console = Console()
        if not console.is_terminal:  # piped or logged: do not squeeze the table to 80 columns
            console = Console(width=200 if wide else 120)
    texts = {h: [_text(h, r, keys) for r in rows] for h, keys in columns}
    hidden = []
    if not wide:
        for header in DROP_FIRST:
            if _table_width(texts, [h for h, _ in columns]) <= console.width:
                break
            if header in texts:
                columns = [(h, k) for h, k in columns if h != header]
                hidden.append(header)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for header, _ in columns:
        table.add_column(
            header,
            justify="right" if header in NUMERIC else "left",
            no_wrap=header != "run",
            overflow="fold" if header == "run" else "ellipsis",
            ratio=1 if header == "run" else None,
            min_width=RUN_MIN_WIDTH if header == "run" else None,
        )
    for i in range(len(rows)):
        table.add_row(*(texts[h][i] for h, _ in columns))
    console.print(table)
    if hidden:
        console.print(
            f"(hidden at this width: {', '.join(hidden)}; --wide shows every column)",
            highlight=False,
        )
    for row in rows:  # named under the table: a damaged file is never a silent blank
        for problem in row.get("unreadable") or ():
            console.print(f"{row['run']}: {problem}", highlight=False, soft_wrap=True)


def _table_width(texts: dict[str, list[str]], headers: list[str]) -> int:
    """The table's width with these columns: each at its widest cell (the run name folded to
    RUN_MIN_WIDTH), plus three characters between columns (padding, the box's gap, padding)."""
    widths = [RUN_MIN_WIDTH if h == "run" else max([len(h), *map(len, texts[h])]) for h in headers]
    return sum(widths) + 3 * (len(widths) - 1)


def _shown(header: str, row: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Whether a cell has something to show (an extension other than none, a number)."""
    value = row.get(keys[0])
    return value not in (None, "none")
