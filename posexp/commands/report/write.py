"""`posexp report DIR`: a Markdown/CSV/PNG report of any sweep or run dir.

The generic part works for any free-form sweep: one row per job keyed by the swept parameters
(the ``.hydra/overrides.yaml`` keys whose values differ between jobs), with the job's status
(completed / failed + its error / unfinished) and every metric of its ``results.json``. The
views (``posexp/commands/report/views/``) add the sections of each kind of experiment.
"""

from __future__ import annotations

import logging
import math
import textwrap
from pathlib import Path
from typing import Any

from posexp.commands.report.jobs import Job, find_jobs, natural_order, swept_keys
from posexp.commands.report.view import ReportContext, fmt, md_table
from posexp.commands.report.views import load_views
from posexp.config import DEVICES
from posexp.errors import PosexpError, choose
from posexp.files import check_writable, write_csv_atomic, write_text_atomic
from posexp.rundir import RunDir

log = logging.getLogger("posexp")


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
        csv_rows.append(
            {
                **dict(zip(keys, values, strict=True)),
                "status": job.status,
                **{k: metrics.get(k) for k in metric_keys},
                "error": job.error,
                "dir": job.name,
            }
        )
    align = ["l"] * len(keys) + ["l"] + ["r"] * len(metric_keys) + ["l"]
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.status] = counts.get(job.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    md = [
        f"{len(jobs)} run{'s' if len(jobs) != 1 else ''}: {summary}.",
        "",
        *([settings, ""] if (settings := settings_line(jobs)) else []),
        md_table(header, rows, align),
    ]
    plot = runs_plot(ctx, jobs)
    if plot:
        md += ["", f"![final metric per run]({plot.name})"]
    return "\n".join(md), csv_rows


# What a reader needs to know of every run, in this order (flattened config keys).
SETTINGS = (
    ("model.name", "model"),
    ("model.d_model", "d_model"),
    ("model.n_layers", "layers"),
    ("heads", "heads"),
    ("pe.name", "pe"),
    ("extension.method", "extension"),
    ("data.source", "data"),
    ("tokenizer.name", "tokenizer"),
    ("train.max_steps", "steps"),
    ("train.batch_size", "batch"),
    ("train.seq_len", "seq_len"),
    ("train.lr", "lr"),
    ("seed", "seed"),
)


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


METRIC_LABELS = {
    "final/val_ppl": "validation perplexity",
    "final/val_loss": "validation loss (nats/token)",
    "final/bleu": "test BLEU",
    "final/chrf": "test chrF",
}


def runs_plot(ctx: ReportContext, jobs: list[Job]) -> Path | None:
    """The final validation ppl (or loss) of each completed job, as points on a zoomed axis."""
    names = [k for j in jobs for k in j.metrics if k.startswith("final/")]
    candidates = [k for k in names if k.endswith("ppl")] + [k for k in names if k.endswith("loss")]
    for key in dict.fromkeys(candidates):
        points = [
            (ctx.label(j), j.metrics[key])
            for j in jobs
            if isinstance(j.metrics.get(key), (int, float)) and math.isfinite(j.metrics[key])
        ]
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
    fig, ax = plt.subplots(
        figsize=(7.5, 1.4 + 0.3 * lines + 0.15 * len(points)), layout="constrained"
    )
    # Runs down the y axis (their labels stay readable), points on a zoomed x axis: the
    # differences between runs are what a reader compares, not the distance from 0.
    ys = list(range(len(values)))[::-1]
    ax.plot(values, ys, "o", color="tab:blue", markersize=7)
    for y, v in zip(ys, values, strict=True):
        ax.annotate(
            f"{v:.4g}", (v, y), textcoords="offset points", xytext=(7, 0), va="center", fontsize=8
        )
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
    return [
        j
        for j in jobs
        if j.status == "completed"
        and j.meta
        and j.extrapolate is None
        and j.config
        and j.config.to_dict()["extrapolate"]
    ]


def write_report(
    target: Path | str, evaluate: bool = True, device: str = "auto", console: Any = None
) -> list[Path]:
    """Write ``report.md``, ``report.csv`` and the views' CSVs and PNGs into ``target``."""
    from rich.console import Console

    console = console or Console()
    target = Path(target)
    choose("--device", device, DEVICES)
    jobs = find_jobs(target)
    check_writable(target, "report folder")
    # One writer per folder: refused while a run trains in it (and so writes into it).
    with RunDir(target).writing("report folder"):
        return _write_report(target, jobs, evaluate, device, console)


def _write_report(
    target: Path, jobs: list[Job], evaluate: bool, device: str, console: Any
) -> list[Path]:
    """``write_report`` once this process holds the folder's lock."""
    pending = pending_evaluations(jobs)
    if pending and evaluate:
        for job, who in [(j, j.run.holder()) for j in pending]:
            if who:  # another process writes that run now: evaluate the others
                console.print(
                    f"{job.path}: not evaluated: another posexp process ({who}) is writing it",
                    soft_wrap=True,
                    highlight=False,
                )
                pending.remove(job)
    if pending and evaluate:
        from posexp.commands.extrapolate.evaluate import evaluate_runs
        from posexp.commands.extrapolate.plan import Settings

        console.print(
            f"evaluating {len(pending)} run(s) at longer lengths first (their config "
            f"has an `extrapolate:` section; --no-eval skips this)",
            highlight=False,
        )
        try:
            evaluate_runs([job.path for job in pending], Settings(device=device), console=console)
        except PosexpError as e:  # a damaged job: the report of the others is still written
            console.print(
                f"report: some evaluations failed: {e}; their jobs are reported without one",
                soft_wrap=True,
                highlight=False,
            )
        jobs = find_jobs(target)
    ctx = ReportContext(target, jobs, swept_keys(jobs))
    runs_md, csv_rows = runs_section(ctx)
    csv_path = target / "report.csv"
    write_csv_atomic(csv_path, csv_rows)
    sections = [
        f"# Report: {target.name}",
        "",
        f"Made by `posexp report {target}`.",
        "",
        "## Runs",
        "",
        runs_md,
    ]
    for view in load_views():
        if view.detect(jobs):
            sections += ["", view.render(ctx)]
    md_path = target / "report.md"
    write_text_atomic(md_path, "\n".join(sections).rstrip() + "\n")
    files = [md_path, csv_path, *ctx.files]
    console.print(f"wrote {', '.join(str(f) for f in files)}", soft_wrap=True, highlight=False)
    return files
