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

from posexp.commands.report.jobs import Job
from posexp.registry import Registry
from posexp.results.labels import distinguishing, run_label, run_labels, setting_key
from posexp.store.files import save_figure_atomic, write_csv_atomic

DRAWN = ".report_figures.json"  # figure -> digest of what it was drawn from (a second report)


@dataclass
class ReportContext:
    """What a view's render function gets: the jobs, where to write, and helpers."""

    target: Path
    jobs: list[Job]
    swept: list[str]
    files: list[Path] = field(default_factory=list)
    _labels: dict[tuple[str, ...], dict[int, str]] = field(default_factory=dict, repr=False)
    memo: dict[str, Any] = field(default_factory=dict, repr=False)  # what views compute once

    def label(self, job: Job, exclude: tuple[str, ...] = ()) -> str:
        """The job's name in tables and plots: the settings that vary across the report's jobs,
        less ``exclude`` (``posexp.results.labels``); jobs alike but for ``exclude`` share it."""
        if exclude not in self._labels:
            names = run_labels([j.settings for j in self.jobs], exclude)
            self._labels[exclude] = {id(j): n for j, n in zip(self.jobs, names, strict=True)}
        return self._labels[exclude].get(id(job)) or run_label(job.settings, [])

    def rest(self, job: Job, exclude: tuple[str, ...]) -> str:
        """The job's varying settings other than ``exclude``, '' when there are none."""
        skip = {setting_key(k) for k in exclude}
        runs = [j.settings for j in self.jobs]
        keys = distinguishing(runs, [k for k in self.swept if k not in skip])
        return run_label(job.settings, keys, identity=False)

    def named_by(self) -> list[str]:
        """The varying settings that tell the jobs apart (those that follow from others left out)."""
        return distinguishing([j.settings for j in self.jobs], self.swept)

    def write_csv(
        self, name: str, rows: list[dict[str, Any]], fields: list[str] | None = None
    ) -> Path:
        """Write ``<target>/<name>`` (CSV, atomic) and remember it."""
        path = self.target / name
        write_csv_atomic(path, rows, fields)
        self.files.append(path)
        return path

    def same_as_last(self, name: str, inputs: bytes) -> bool:
        """Whether the last report made ``name`` from the same ``inputs`` (what it shows); the
        digest is noted for the next report either way (``save_drawn``)."""
        import hashlib

        from posexp.errors import PosexpError
        from posexp.store.files import read_json

        key = hashlib.sha256(inputs).hexdigest()
        self.memo.setdefault("drawn", {})[name] = key
        if "drawn_last" not in self.memo:
            try:
                self.memo["drawn_last"] = read_json(self.target / DRAWN) or {}
            except PosexpError:  # a damaged note only costs a redraw
                self.memo["drawn_last"] = {}
        return self.memo["drawn_last"].get(name) == key

    def drawn_already(self, name: str, inputs: str) -> Path | None:
        """``<target>/<name>`` when the last report drew it from the same ``inputs`` and its PNG
        and SVG are still there: drawing it again would give the same file, so a second report
        skips it. None otherwise."""
        path = self.target / name
        same = self.same_as_last(name, inputs.encode())
        if same and path.is_file() and path.with_suffix(".svg").is_file():
            self.files.append(path)
            return path
        return None

    def save_drawn(self) -> None:
        """Note what each figure drawn through ``drawn_already`` was drawn from."""
        from posexp.store.files import write_json_atomic

        if self.memo.get("drawn"):
            write_json_atomic(self.target / DRAWN, self.memo["drawn"])

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
