"""`posexp report DIR`: a Markdown/CSV/PNG report of any sweep or run dir.

The generic part works for any free-form sweep: one row per job keyed by the swept parameters
(the ``.hydra/overrides.yaml`` keys whose values differ between jobs), with the job's status
(completed / failed + its error / unfinished) and every metric of its ``results.json``.

Experiment-specific sections are *views*: ``register_report_view(name, detect, render)`` adds
one. ``detect(jobs) -> bool`` says whether the view applies, ``render(ctx) -> str`` returns its
Markdown and writes its own files through ``ctx.write_csv`` / ``ctx.save_figure``. Views live in
this module or in any module ``posexp/tasks/report_*.py``, which is imported automatically.

Built-in view ``extrapolation``: rows = evaluation length, columns = PE (and PE+method), from
each job's ``eval/extrapolate.json``, next to the ALiBi paper's published numbers.
"""

from __future__ import annotations

import importlib
import logging
import math
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.files import check_writable, save_figure_atomic, write_csv_atomic, write_text_atomic
from posexp.rundir import EVAL, RunDir, find_runs
from posexp.tasks.extrapolate_plan import PROTOCOLS

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


def _natural(value: Any) -> tuple:
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
    jobs = sorted(ctx.jobs, key=lambda j: tuple(_natural(j.params.get(k)) for k in ctx.swept))
    metric_keys: list[str] = []
    for job in jobs:
        for key in job.metrics:
            if key not in metric_keys:
                metric_keys.append(key)
    keys = ctx.swept or ["run"]
    header = [*keys, "status", *metric_keys, "error"]
    rows, csv_rows = [], []
    for job in jobs:
        values = [job.params.get(k, "") for k in ctx.swept] if ctx.swept else [job.name]
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
          md_table(header, rows, align)]
    plot = runs_plot(ctx, jobs)
    if plot:
        md += ["", f"![final metric per run]({plot.name})"]
    return "\n".join(md), csv_rows


def runs_plot(ctx: ReportContext, jobs: list[Job]) -> Path | None:
    """Bar chart of the final validation ppl (or loss) of completed jobs."""
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

    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(points) + 2), 3.6), layout="constrained")
    labels, values = zip(*points, strict=True)
    ax.bar(range(len(values)), values, color="tab:blue")
    ax.set_xticks(range(len(values)), labels, rotation=30 if len(points) > 3 else 0, ha="right"
                  if len(points) > 3 else "center", fontsize=8)
    ax.set_ylabel(key)
    ax.set_title(f"{key} per run", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
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


# ---- extrapolation view --------------------------------------------------------------------

# Press et al. 2022 (ALiBi), WikiText-103, trained at L = 512: validation ppl (docs/experiments.md).
ALIBI_PAPER_TRAIN_LENGTH = 512
ALIBI_PAPER = {
    "L_valid": [512, 1012, 2512, 8512, 15512],
    "sinusoidal": [20.05, 43.54, 132.41, 305.65, 406.01],
    "rotary": [20.07, 21.37, 31.58, 54.98, 79.25],
    "T5 bias": [19.65, 18.79, 20.41, 43.08, None],  # None: out of memory in the paper
    "ALiBi": [19.73, 18.73, 18.41, 18.34, 18.31],
}
PE_ORDER = ("sinusoidal", "learned", "none", "rope", "alibi")
PE_LABEL = {"none": "nope"}


@dataclass
class Column:
    """One column of the extrapolation table: a job's PE with one method."""

    label: str
    job: Job
    method: str
    records: dict[tuple[str, int], dict[str, Any]]


def extrapolation_columns(ctx: ReportContext) -> list[Column]:
    """Columns ordered like the paper: sinusoidal, learned, NoPE, rope (+methods), alibi."""
    from posexp.extension import EXTENSIONS

    jobs = [j for j in ctx.jobs if j.extrapolate]
    pes = [j.pe for j in jobs]
    method_order = ["none", *EXTENSIONS]
    columns = []
    for job in sorted(jobs, key=lambda j: (PE_ORDER.index(j.pe) if j.pe in PE_ORDER else 99,
                                           tuple(_natural(j.params.get(k)) for k in ctx.swept))):
        base = PE_LABEL.get(job.pe, job.pe)
        if pes.count(job.pe) > 1:  # several jobs per PE: name them by their other swept params
            extra = ctx.label(job, exclude=("pe",))
            base = f"{base} [{extra}]" if extra else base
        methods = list(dict.fromkeys(r["method"] for r in job.extrapolate))
        methods.sort(key=lambda m: -1 if ":" in m else
                     method_order.index(m) if m in method_order else 99)
        for method in methods:
            recs = {(r["protocol"], r["length"]): r for r in job.extrapolate if r["method"] == method}
            label = base if method == "none" else f"{base}+{method}"
            columns.append(Column(label, job, method, recs))
    return columns


def _cell(record: dict[str, Any] | None, notes: list[str]) -> str:
    if record is None:
        return ""
    if record.get("ppl") is None:
        note = record.get("note") or "not evaluated"
        if note not in notes:
            notes.append(note)
        return f"n/a [{notes.index(note) + 1}]"
    return fmt(float(record["ppl"]))


def render_extrapolation(ctx: ReportContext) -> str:
    """ALiBi-paper style tables (rows = length, columns = PE[+method]) and plots."""
    columns = extrapolation_columns(ctx)
    train_lengths = {c.job.train_length for c in columns}
    l0 = train_lengths.pop() if len(train_lengths) == 1 else None
    protocols = [p for p in PROTOCOLS if any(p == k[0] for c in columns for k in c.records)]
    md = ["## Length extrapolation", "",
          f"Test-split perplexity by evaluation length (`posexp eval-extrapolate`); "
          f"{'trained at ' + str(l0) + ' tokens' if l0 else 'training lengths differ'}. "
          "Columns: PE, and PE+method for context-extension methods applied at evaluation time "
          "(factor = length / training length unless the run says otherwise). "
          "Lower is better; a flat column extrapolates."]
    notes: list[str] = []
    csv_rows = []
    for protocol in protocols:
        lengths = sorted({k[1] for c in columns for k in c.records if k[0] == protocol})
        header = ["length", *(["× L_train"] if l0 else []), *(c.label for c in columns)]
        rows = []
        for n in lengths:
            cells = [_cell(c.records.get((protocol, n)), notes) for c in columns]
            rows.append([n, *([f"{n / l0:g}"] if l0 else []), *cells])
            csv_rows.append({"protocol": protocol, "length": n, **({"multiple": n / l0} if l0 else {}),
                             **{c.label: (c.records.get((protocol, n)) or {}).get("ppl")
                                for c in columns}})
        stride = {r.get("stride") for c in columns for k, r in c.records.items()
                  if k[0] == protocol and r.get("stride")}
        tokens = {r.get("tokens") for c in columns for k, r in c.records.items()
                  if k[0] == protocol and r.get("tokens")}
        desc = ("non-overlapping windows" if protocol == "nonoverlap"
                else f"sliding window, stride {', '.join(map(str, sorted(stride)))}")
        md += ["", f"### {protocol}: {desc}; {', '.join(map(str, sorted(tokens)))} scored tokens "
                   "per length", "", md_table(header, rows, ["r"] * len(header))]
        if l0 and len(lengths) > 1:
            md += ["", "ppl relative to the training length (shape comparison):", "",
                   ratio_table(columns, protocol, lengths, l0)]
        plot = extrapolation_plot(ctx, columns, protocol, l0)
        md += ["", f"![ppl vs length, {protocol}]({plot.name})"]
    if notes:
        md += ["", *(f"[{i + 1}] {note}" for i, note in enumerate(notes))]
    methods = {c.method for c in columns}
    reading = []
    if {"ntk", "dynamic_ntk"} <= methods:
        reading.append("dynamic_ntk equals ntk here: every window starts at position 0, so at "
                       "length L dynamic NTK's base is static NTK's with s = L / L_train; the two "
                       "differ only while a sequence grows (generation with a KV cache).")
    if len(protocols) > 1:
        reading.append("sliding is the harsher protocol past the training length: every scored "
                       "token sits at least L - stride positions in, while non-overlapping windows "
                       "also score the in-distribution start of each window.")
    if "pi" in methods:
        reading.append("pi (and yarn) are meant to be fine-tuned at the longer length "
                       "(`posexp finetune`); applied zero-shot, pi hurts.")
    if reading:
        md += ["", "Reading the table:", "", *(f"- {r}" for r in reading)]
    path = ctx.write_csv("report_extrapolation.csv", csv_rows)
    md += ["", f"All numbers: [{path.name}]({path.name}); per run: `<run>/eval/extrapolate.json`.",
           "", published_section()]
    return "\n".join(md)


def ratio_table(columns: list[Column], protocol: str, lengths: list[int], l0: int) -> str:
    """ppl(L) / ppl(L_train) per column."""
    rows = []
    for n in lengths:
        row: list[Any] = [n, f"{n / l0:g}"]
        for c in columns:
            base, rec = c.records.get((protocol, l0)), c.records.get((protocol, n))
            ok = base and rec and base.get("ppl") and rec.get("ppl") is not None
            row.append(f"{rec['ppl'] / base['ppl']:.2f}" if ok else "—")
        rows.append(row)
    header = ["length", "× L_train", *(c.label for c in columns)]
    return md_table(header, rows, ["r"] * len(header))


def published_section() -> str:
    """docs/experiments.md: the ALiBi paper's numbers, with ratios to the training length."""
    cols = [k for k in ALIBI_PAPER if k != "L_valid"]
    rows = []
    for i, n in enumerate(ALIBI_PAPER["L_valid"]):
        cells = []
        for c in cols:
            v, v0 = ALIBI_PAPER[c][i], ALIBI_PAPER[c][0]
            cells.append("OOM" if v is None else f"{v:.2f} ({v / v0:.2f}×)")
        rows.append([n, f"{n / ALIBI_PAPER_TRAIN_LENGTH:.1f}", *cells])
    return "\n".join([
        "### Published, for shape comparison",
        "",
        "Press et al. 2022 (ALiBi), WikiText-103, 247M-parameter models trained at L = 512, "
        "validation ppl (ratio to L = 512). Absolute numbers differ by design (corpus, size); "
        "compare the shape: sinusoidal explodes, rotary degrades, ALiBi stays flat.",
        "",
        md_table(["L_valid", "× L_train", *cols], rows, ["r"] * (len(cols) + 2)),
    ])


def extrapolation_plot(ctx: ReportContext, columns: list[Column], protocol: str, l0: int | None) -> Path:
    """ppl against length (log-log, plain ticks), one line per column, styles that stay distinct."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.tasks.extrapolate_outputs import MARKERS, plain_log_axes

    fig, ax = plt.subplots(figsize=(9.5, 5.0), layout="constrained")
    palette = plt.get_cmap("tab10" if len(columns) <= 10 else "tab20").colors
    lengths: set[int] = set()
    for i, c in enumerate(columns):
        pts = sorted((n, r["ppl"]) for (p, n), r in c.records.items()
                     if p == protocol and r.get("ppl") is not None)
        if pts:
            lengths.update(n for n, _ in pts)
            style = "-" if c.method == "none" else "--"
            ax.plot(*zip(*pts, strict=True), style, marker=MARKERS[i % len(MARKERS)],
                    markersize=8 - 1.5 * (i % 4), label=c.label, color=palette[i % len(palette)])
    if l0:
        ax.axvline(l0, color="grey", linestyle=":", linewidth=1, label=f"training length ({l0:,})")
    if lengths:
        plain_log_axes(ax, sorted(lengths))
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("test perplexity (log scale)")
    ax.set_title(f"Test perplexity against evaluation length ({protocol} windows); "
                 "solid: no extension, dashed: with one", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)
    return ctx.save_figure(fig, f"report_extrapolation_{protocol}.png")


register_report_view("extrapolation", lambda jobs: any(j.extrapolate for j in jobs),
                     render_extrapolation, order=10)
