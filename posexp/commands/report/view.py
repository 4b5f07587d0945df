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
from posexp.results.labels import distinguishing, run_label, run_labels, setting_key, varying
from posexp.store.files import save_figure_atomic, write_csv_atomic

DRAWN = ".report_figures.json"  # figure -> digest of what it was drawn from (a second report)


def is_fine_tune(job: Job) -> bool:
    """Whether the job was started from another run (``parent=``): a fine-tune."""
    return getattr(getattr(job, "config", None), "parent", None) not in (None, "", "None")


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
        """The job's name in tables and plots: the settings that vary across the report's jobs
        trained from scratch, less ``exclude`` (``posexp.results.labels``); a fine-tune's, what
        it changed from its parent (``lineage``) and its parent's seed. Jobs alike but for
        ``exclude`` share a name."""
        if exclude not in self._labels:
            plain = [j for j in self.jobs if not is_fine_tune(j)]
            names = run_labels([j.settings for j in plain], exclude) if plain else []
            self._labels[exclude] = {id(j): n for j, n in zip(plain, names, strict=True)}
            self._labels[exclude].update(self._fine_tune_labels(exclude))
        return self._labels[exclude].get(id(job)) or run_label(job.settings, [])

    def _fine_tune_labels(self, exclude: tuple[str, ...]) -> dict[int, str]:
        """Each fine-tune's name: its change, what else tells it from the fine-tunes of the same
        change (less ``exclude``), and its parent's seed unless ``exclude`` has the seed."""
        lineage, parents = self.lineage(), self.memo.get("parents", {})
        by_change: dict[str, list[Job]] = {}
        for job in self.jobs:
            if is_fine_tune(job):
                by_change.setdefault(lineage[str(job.path)], []).append(job)
        skip = {setting_key(k) for k in (*exclude, "seed", "fine-tuned", "train.max_steps")}
        out = {}
        for change, group in by_change.items():
            runs = [j.settings for j in group]
            keys = distinguishing(runs, [k for k in varying(runs) if k not in skip])
            for job in group:
                parent = parents.get(str(job.path))
                seed = "" if "seed" in exclude or parent is None else f"s{parent.seed}"
                extra = run_label(job.settings, keys, identity=False)
                out[id(job)] = " ".join(t for t in (change, extra, seed) if t)
        return out

    def lineage(self) -> dict[str, str]:
        """Each fine-tuned job's run -> what it changed from its parent (its rows' tag, through
        ``posexp.results.labels.finetune_label``): ``yarn(factor=4) L256 ft 200 steps``."""
        from posexp.errors import PosexpError
        from posexp.results.labels import finetune_label
        from posexp.store.rundir import RunDir

        if "lineage" in self.memo:
            return self.memo["lineage"]
        out: dict[str, str] = {}
        parents: dict[str, Any] = {}
        tuned = [j for j in self.jobs if is_fine_tune(j)]
        shown = {job.path.resolve(): job for job in self.jobs} if tuned else {}
        for job in tuned:
            given = Path(str(job.config.parent))
            where = given.resolve()
            # A parent named relative to where the fine-tune ran, or a sweep since moved: the
            # job of this report in the folder of the parent's name.
            moved = [j for j in self.jobs if j.path.name == given.name and j is not job]
            if where not in shown and not where.exists() and len(moved) == 1:
                where = moved[0].path.resolve()
            try:  # the parent's config: read once where the report shows it too
                parent = shown[where].config if where in shown else RunDir(where).config()
            except (PosexpError, OSError):  # the parent moved or lost its config
                parent = None
            parents[str(job.path)] = parent
            out[str(job.path)] = finetune_label(job.config, parent)
        self.memo["lineage"], self.memo["parents"] = out, parents
        return out

    def rest(self, job: Job, exclude: tuple[str, ...]) -> str:
        """The job's varying settings other than ``exclude``, '' when there are none. A run
        trained from scratch is told apart from the others trained from scratch only: fine-tunes
        are named by what they changed, so their steps or length never tag their parents."""
        skip = {setting_key(k) for k in exclude}
        runs = [j.settings for j in self.jobs if is_fine_tune(j) == is_fine_tune(job)]
        keys = [k for k in self.swept if k not in skip]
        if "pe" in skip:  # the PE named apart: what its label already tells (a design's
            # windows) is not said again; what it does not (T5's max_distance) still is
            keys = [k for k in distinguishing(runs, ["pe", *keys]) if k != "pe"]
        else:
            keys = distinguishing(runs, keys)
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

    def figure(self, name: str, inputs: str, draw: Callable[[], Any]) -> Path:
        """``<target>/<name>``: drawn by ``draw()`` (a matplotlib figure) and saved, unless the
        last report drew it from the same ``inputs`` (everything the figure shows, as text) and
        its files are still there, when a second report keeps it as it is."""
        return self.drawn_already(name, inputs) or self.save_figure(draw(), name)

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
