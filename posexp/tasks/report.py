"""`posexp report DIR`: a Markdown/CSV/PNG report of any sweep or run dir.

The generic part works for any free-form sweep: one row per job keyed by the swept parameters
(the ``.hydra/overrides.yaml`` keys whose values differ between jobs), with the job's status
(completed / failed + its error / unfinished) and every metric of its ``results.json``.

Experiment-specific sections are *views*: ``register_report_view(name, detect, render)`` adds
one. ``detect(jobs) -> bool`` says whether the view applies, ``render(ctx) -> str`` returns its
Markdown and writes its own files through ``ctx.write_csv`` / ``ctx.save_figure``. Views live in
this module or in any module ``posexp/tasks/report_*.py``, which is imported automatically.

Views shipped: ``extrapolation`` (``report_extrapolation.py``) and ``head_ablation``
(``report_heads.py``).
"""

from __future__ import annotations

import importlib
import logging
import math
import pkgutil
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from posexp.config import DEVICES, RunConfig
from posexp.errors import PosexpError, choose
from posexp.files import check_writable, save_figure_atomic, write_csv_atomic, write_text_atomic
from posexp.rundir import EVAL, RunDir, find_runs

log = logging.getLogger("posexp")

# Keys that never distinguish jobs in a table (seeds are shown when they vary).
HIDDEN_PARAMS = ("hydra.", "device")


# ---- jobs ----------------------------------------------------------------------------------


@dataclass
class Job:
    """One run dir of a sweep (or the run itself), read from its files only."""

    run: RunDir
    name: str

    @property
    def path(self) -> Path:
        return self.run.path

    @cached_property
    def overrides(self) -> list[str]:
        return self.run.overrides()

    @cached_property
    def params(self) -> dict[str, str]:
        """The job's overrides as key -> value (last one wins)."""
        out = {}
        for o in self.overrides:
            key, _, value = o.partition("=")
            out[key.lstrip("+~")] = value
        return out

    @cached_property
    def results(self) -> dict[str, Any] | None:
        return self.run.results()

    @cached_property
    def meta(self) -> dict[str, Any] | None:
        try:
            return self.run.meta() if self.run.has_checkpoint() else None
        except PosexpError:
            return None

    @cached_property
    def config(self) -> RunConfig | None:
        """The job's typed config; None when it has none or it is invalid (a job that failed on it)."""
        try:
            return self.run.config()
        except PosexpError:
            return None

    @property
    def status(self) -> str:
        return self.run.status()

    @cached_property
    def flat_config(self) -> dict[str, Any]:
        """The config as ``{"train.lr": 0.003, ...}``; empty when there is none."""
        from posexp.tasks.sweeps import flatten

        return flatten(self.config.to_dict()) if self.config else {}

    def setting(self, key: str) -> str:
        """A config value by its override key (``pe``, ``train.lr``) when not overridden; '' if unknown."""
        flat = self.flat_config
        value = flat.get(key, flat.get(f"{key}.name", flat.get(f"{key}.source", "")))
        return "" if value is None else str(value)

    @property
    def error(self) -> str:
        if self.results and self.results.get("error"):
            return str(self.results["error"])
        if self.status == "unfinished":
            if self.meta:
                total = f" of {self.config.train.max_steps}" if self.config else ""
                return f"no results.json; checkpoint at step {self.meta.get('step')}{total}"
            return "no results.json and no checkpoint (still running, or killed)"
        return ""

    @property
    def metrics(self) -> dict[str, Any]:
        return {k: v for k, v in (self.results or {}).items() if k not in ("status", "error")}

    @property
    def pe(self) -> str:
        if self.meta:
            return str(self.meta["model"]["pe"])
        return self.config.pe.name if self.config else self.params.get("pe", "?")

    @property
    def train_length(self) -> int | None:
        if self.meta:
            return int(self.meta["model"]["train_length"])
        return self.config.length0 if self.config else None

    @cached_property
    def extrapolate(self) -> list[dict[str, Any]] | None:
        data = self.run.read_json(f"{EVAL}/extrapolate.json")
        return data if isinstance(data, list) else None


def find_jobs(target: Path) -> list[Job]:
    """The run dir itself, or every job dir below a sweep dir (outermost job dirs only)."""
    try:
        runs = find_runs(target)
    except PosexpError as e:
        raise PosexpError(f"report: {e}") from None
    return [Job(r, str(r.path.relative_to(target)) if r.path != Path(target) else r.path.name)
            for r in runs]


def swept_keys(jobs: list[Job]) -> list[str]:
    """Override keys whose values differ between jobs (all of them for a single job)."""
    keys: list[str] = []
    for job in jobs:
        for key in job.params:
            if key not in keys and not key.startswith(HIDDEN_PARAMS):
                keys.append(key)
    if len(jobs) == 1:
        return keys
    return [k for k in keys if len({job.params.get(k) for job in jobs}) > 1]


def natural_order(value: Any) -> tuple:
    """Sort key that orders the numbers inside a value by size: h2 < h10, 0.5 < 1.5."""
    text = "" if value is None else str(value)
    return tuple((0, float(p), "") if re.fullmatch(r"-?\d+(\.\d+)?", p) else (1, 0.0, p)
                 for p in re.split(r"(-?\d+(?:\.\d+)?)", text) if p)


# ---- views ---------------------------------------------------------------------------------


@dataclass
class ReportContext:
    """What a view's render function gets: the jobs, where to write, and helpers."""

    target: Path
    jobs: list[Job]
    swept: list[str]
    files: list[Path] = field(default_factory=list)

    def label(self, job: Job, exclude: tuple[str, ...] = ()) -> str:
        """The job's swept params as ``k=v k=v`` (its dir name when nothing is swept)."""
        parts = [f"{k}={job.params[k]}" for k in self.swept if k in job.params and k not in exclude]
        return " ".join(parts) or job.name

    def write_csv(self, name: str, rows: list[dict[str, Any]], fields: list[str] | None = None) -> Path:
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


REPORT_VIEWS: dict[str, ReportView] = {}


def register_report_view(name: str, detect: Callable[[list[Job]], bool],
                         render: Callable[[ReportContext], str], order: int = 100) -> ReportView:
    """Register a view: ``detect(jobs)`` says if it applies, ``render(ctx)`` returns Markdown."""
    if name in REPORT_VIEWS:
        raise ValueError(f"report view {name!r} registered twice")
    REPORT_VIEWS[name] = ReportView(name, detect, render, order)
    return REPORT_VIEWS[name]


def load_views() -> dict[str, ReportView]:
    """Import every ``posexp.tasks.report_*`` module (each registers its views), then list them."""
    import posexp.tasks as tasks

    for info in pkgutil.iter_modules(tasks.__path__):
        if info.name.startswith("report_"):
            importlib.import_module(f"posexp.tasks.{info.name}")
    return dict(sorted(REPORT_VIEWS.items(), key=lambda kv: (kv[1].order, kv[0])))


# ---- markdown helpers ----------------------------------------------------------------------


def md_table(header: list[str], rows: list[list[Any]], align: list[str] | None = None) -> str:
    """A GitHub Markdown table; ``align`` holds 'l' or 'r' per column."""
    align = align or ["l"] * len(header)

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
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


# ---- generic part --------------------------------------------------------------------------


def runs_section(ctx: ReportContext) -> tuple[str, list[dict[str, Any]]]:
    """The table of every job: swept params, status, step, metrics, error."""
    jobs = sorted(ctx.jobs, key=lambda j: tuple(natural_order(j.params.get(k)) for k in ctx.swept))
    metric_keys: list[str] = []
    for job in jobs:
        for key in job.metrics:
            if key not in metric_keys:
                metric_keys.append(key)
    keys = ctx.swept or ["run"]
    header = [*keys, "status", *metric_keys, "error"]
    rows, csv_rows = [], []
    for job in jobs:
        values = [job.params.get(k, job.setting(k)) for k in ctx.swept] if ctx.swept else [job.name]
        metrics = job.metrics
        rows.append([*values, job.status, *(fmt(metrics.get(k)) for k in metric_keys), job.error])
        csv_rows.append({**dict(zip(keys, values, strict=True)), "status": job.status,
                         **{k: metrics.get(k) for k in metric_keys}, "error": job.error,
                         "dir": job.name})
    align = ["l"] * len(keys) + ["l"] + ["r"] * len(metric_keys) + ["l"]
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.status] = counts.get(job.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    md = [f"{len(jobs)} run{'s' if len(jobs) != 1 else ''}: {summary}.", "",
          *([settings, ""] if (settings := settings_line(jobs)) else []), md_table(header, rows, align)]
    plot = runs_plot(ctx, jobs)
    if plot:
        md += ["", f"![final metric per run]({plot.name})"]
    return "\n".join(md), csv_rows


# What a reader needs to know of every run, in this order (flattened config keys).
SETTINGS = (("model.name", "model"), ("model.d_model", "d_model"), ("model.n_layers", "layers"),
            ("heads", "heads"), ("pe.name", "pe"), ("extension.method", "extension"),
            ("data.source", "data"), ("tokenizer.name", "tokenizer"), ("train.max_steps", "steps"),
            ("train.batch_size", "batch"), ("train.seq_len", "seq_len"), ("train.lr", "lr"),
            ("seed", "seed"))


def settings_line(jobs: list[Job]) -> str:
    """The settings every run shares, and which ones vary, read from the runs' configs."""
    configs = [j.flat_config for j in jobs if j.config]
    if not configs:
        return ""
    fixed, varying = [], []
    for key, name in SETTINGS:
        values = {repr(c.get(key)) for c in configs}
        if len(values) == 1:
            fixed.append(f"{name} {configs[0].get(key)}")
        else:
            varying.append(name)
    line = f"Fixed settings: {', '.join(fixed)}."
    return line + (f" Varying: {', '.join(varying)}." if varying else "")


METRIC_LABELS = {"final/val_ppl": "validation perplexity", "final/val_loss": "validation loss (nats/token)",
                 "final/bleu": "test BLEU", "final/chrf": "test chrF"}


def runs_plot(ctx: ReportContext, jobs: list[Job]) -> Path | None:
    """The final validation ppl (or loss) of each completed job, as points on a zoomed axis."""
    names = [k for j in jobs for k in j.metrics if k.startswith("final/")]
    candidates = [k for k in names if k.endswith("ppl")] + [k for k in names if k.endswith("loss")]
    for key in dict.fromkeys(candidates):
        points = [(ctx.label(j), j.metrics[key]) for j in jobs
                  if isinstance(j.metrics.get(key), (int, float)) and math.isfinite(j.metrics[key])]
        if points:
            break
    else:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label = METRIC_LABELS.get(key, key.removeprefix("final/").replace("_", " "))
    names = ["\n".join(textwrap.wrap(name, 44)) or "?" for name, _ in points]
    values = [v for _, v in points]
    lines = sum(n.count("\n") + 1 for n in names)
    fig, ax = plt.subplots(figsize=(7.5, 1.4 + 0.3 * lines + 0.15 * len(points)), layout="constrained")
    # Runs down the y axis (their labels stay readable), points on a zoomed x axis: the
    # differences between runs are what a reader compares, not the distance from 0.
    ys = list(range(len(values)))[::-1]
    ax.plot(values, ys, "o", color="tab:blue", markersize=7)
    for y, v in zip(ys, values, strict=True):
        ax.annotate(f"{v:.4g}", (v, y), textcoords="offset points", xytext=(7, 0), va="center",
                    fontsize=8)
    low, high = min(values), max(values)
    pad = (high - low) * 0.1 or abs(high) * 0.05 or 1.0
    ax.set_xlim(low - pad, high + 2.5 * pad)
    ax.set_ylim(-0.6, len(values) - 0.4)
    ax.set_yticks(ys, names, fontsize=8)
    ax.set_xlabel(label + (" (axis not from 0)" if low - pad > 0 else ""))
    ax.set_title(f"Final {label} per run", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    return ctx.save_figure(fig, "report_runs.png")


def pending_evaluations(jobs: list[Job]) -> list[Job]:
    """Completed jobs whose config asks for an extrapolation eval (a preset) and lack one."""
    return [j for j in jobs if j.status == "completed" and j.meta and j.extrapolate is None
            and j.config and j.config.to_dict()["extrapolate"]]


def write_report(target: Path | str, evaluate: bool = True, device: str = "auto",
                 console: Any = None) -> list[Path]:
    """Write ``report.md``, ``report.csv`` and the views' CSVs and PNGs into ``target``."""
    from rich.console import Console

    console = console or Console()
    target = Path(target)
    choose("--device", device, DEVICES)
    jobs = find_jobs(target)
    check_writable(target, "report folder")
    pending = pending_evaluations(jobs)
    if pending and evaluate:
        from posexp.tasks.evaluate import evaluate_runs
        from posexp.tasks.extrapolate_plan import Settings

        console.print(f"evaluating {len(pending)} run(s) at longer lengths first (their config "
                      f"has an `extrapolate:` section; --no-eval skips this)", highlight=False)
        evaluate_runs([job.path for job in pending], Settings(device=device), console=console)
        jobs = find_jobs(target)
    ctx = ReportContext(target, jobs, swept_keys(jobs))
    runs_md, csv_rows = runs_section(ctx)
    csv_path = target / "report.csv"
    write_csv_atomic(csv_path, csv_rows)
    sections = [f"# Report: {target.name}", "", f"Made by `posexp report {target}`.", "",
                "## Runs", "", runs_md]
    for view in load_views().values():
        if view.detect(jobs):
            sections += ["", view.render(ctx)]
    md_path = target / "report.md"
    write_text_atomic(md_path, "\n".join(sections).rstrip() + "\n")
    files = [md_path, csv_path, *ctx.files]
    console.print(f"wrote {', '.join(str(f) for f in files)}", soft_wrap=True, highlight=False)
    return files
