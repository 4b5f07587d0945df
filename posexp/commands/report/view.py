"""What a report view is: a section for one kind of experiment, found by name.

``register_report_view(name, detect, render)`` adds one. ``detect(jobs) -> bool`` says whether
the view applies, ``render(ctx) -> str`` returns its Markdown and writes its own files through
``ctx.write_csv`` / ``ctx.save_figure``. Each module of ``posexp/commands/report/views/``
registers its views when that package is imported.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posexp.commands.report.jobs import Job, swept_value
from posexp.files import save_figure_atomic, write_csv_atomic
from posexp.registry import Registry


@dataclass
class ReportContext:
    """What a view's render function gets: the jobs, where to write, and helpers."""

    target: Path
    jobs: list[Job]
    swept: list[str]
    files: list[Path] = field(default_factory=list)

    def label(self, job: Job, exclude: tuple[str, ...] = ()) -> str:
        """The job's swept params as ``k=v k=v``, each its override or else its resolved
        config's value (its dir name when nothing is swept)."""
        values = {k: swept_value(job, k) for k in self.swept if k not in exclude}
        parts = [f"{k}={v}" for k, v in values.items() if v]
        return " ".join(parts) or job.name

    def write_csv(
        self, name: str, rows: list[dict[str, Any]], fields: list[str] | None = None
    ) -> Path:
        """Write ``<target>/<name>`` (CSV, atomic) and remember it."""
        path = self.target / name
        write_csv_atomic(path, rows, fields)
        self.files.append(path)
        return path

    def save_figure(self, fig: Any, name: str) -> Path:
        """Save a matplotlib figure as ``<target>/<name>`` (PNG, atomic) and remember it."""
        path = self.target / name
        save_figure_atomic(fig, path)
        self.files.append(path)
        return path


@dataclass(frozen=True)
class ReportView:
    """A report section for one kind of experiment."""

    name: str
    detect: Callable[[list[Job]], bool]
    render: Callable[[ReportContext], str]
    order: int = 100


REPORT_VIEWS: Registry[ReportView] = Registry("report view")


def register_report_view(
    name: str,
    detect: Callable[[list[Job]], bool],
    render: Callable[[ReportContext], str],
    order: int = 100,
) -> ReportView:
    """Register a view: ``detect(jobs)`` says if it applies, ``render(ctx)`` returns Markdown."""
    return REPORT_VIEWS.add(name, ReportView(name, detect, render, order))


# ---- markdown helpers ----------------------------------------------------------------------


def md_table(header: list[str], rows: list[list[Any]], align: list[str] | None = None) -> str:
    """A GitHub Markdown table; ``align`` holds 'l' or 'r' per column."""
    align = align or ["l"] * len(header)

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(cell(h) for h in header) + " |",
        "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|",
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: Any) -> str:
    """Numbers with 4 significant digits (integers as they are), None as '—'."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3e}"
    return str(value)
