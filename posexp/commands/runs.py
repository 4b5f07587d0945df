"""`posexp runs`: one table of every run under a folder (single runs and sweep jobs alike).

Each row comes from the run dir's own files (checkpoint meta, config, results.json,
provenance.json), so it works for finished, failed, unfinished and resumed runs.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from posexp.commands.report.jobs import Job, find_jobs
from posexp.errors import PosexpError
from posexp.rundir import RunDir

FIELDS = (
    "run",
    "data",
    "pe",
    "heads",
    "extension",
    "steps",
    "status",
    "val_ppl",
    "val_acc",
    "bleu",
    "minutes",
)


def _minutes(path: Path) -> float | None:
    """Wall minutes over the run's training sessions (provenance.json), None if unknown."""
    try:
        sessions = json.loads(RunDir(path).provenance_file.read_text())["sessions"]
        total = sum(
            (
                datetime.fromisoformat(s["ended"]) - datetime.fromisoformat(s["started"])
            ).total_seconds()
            for s in sessions
            if s.get("ended")
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return round(total / 60, 1)


def run_row(job: Job, root: Path) -> dict[str, Any]:
    """One run as a flat record."""
    cfg, meta, metrics = job.config, job.meta or {}, job.metrics
    model = meta.get("model") or {}
    ext = model.get("extension") or (cfg.extension.to_dict() if cfg else {})
    total = cfg.train.max_steps if cfg else None
    step = meta.get("step")
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
        "pe": job.pe,
        "heads": model.get("n_heads", cfg.heads if cfg else None),
        "extension": ext.get("method", "none"),
        "steps": f"{step if step is not None else '-'}/{total if total is not None else '?'}",
        "status": job.status,
        "val_ppl": metrics.get("final/val_ppl"),
        "val_acc": metrics.get("final/val_accuracy"),
        "bleu": metrics.get("final/bleu"),
        "minutes": _minutes(job.path),
    }


def list_runs(root: Path | str = Path("outputs")) -> list[dict[str, Any]]:
    """Every run under ``root``, oldest first."""
    root = Path(root)
    if root.is_file():
        raise PosexpError(
            f"runs: {str(root)!r} is a file, not a folder; pass a run dir or a folder "
            f"of runs (default: outputs)"
        )
    if not root.is_dir():
        raise PosexpError(
            f"runs: no such directory {str(root)!r} (train a run first, or pass a folder)"
        )
    jobs = sorted(find_jobs(root), key=lambda j: j.path.stat().st_mtime)
    return [run_row(j, root) for j in jobs]


def print_runs(rows: list[dict[str, Any]], console: Any = None) -> None:
    """The rows as a terminal table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for name in FIELDS:
        table.add_column(
            name,
            no_wrap=True,
            justify="right"
            if name in ("heads", "steps", "val_ppl", "val_acc", "bleu", "minutes")
            else "left",
        )
    for r in rows:
        cells = [r[k] for k in FIELDS]
        table.add_row(
            *("–" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v) for v in cells)
        )
    if console is None:
        console = Console()
        if not console.is_terminal:  # piped or logged: do not squeeze the table to 80 columns
            console = Console(width=200)
    console.print(table)
