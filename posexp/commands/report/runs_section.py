"""The report's generic "Runs" section: one row per job, for any sweep or run dir.

Rows are keyed by the swept parameters (their resolved values), metrics get readable names and
a fixed number of decimals per column, settings shared by every run (config and constant
metrics) move to one "Fixed settings" line, and a sentence computed from the numbers names the
best and worst runs and whether their gap exceeds the seed spread.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from posexp.commands.report.jobs import Job, natural_order, swept_value
from posexp.commands.report.stats import MIN_SEEDS, decimals_for, mean_std
from posexp.commands.report.view import ReportContext, fmt, md_table
from posexp.commands.report.views.findings import job_pe, pe_colors
from posexp.results.labels import is_plumbing, setting_key, short_names
from posexp.results.verdict import rule
from posexp.store.sweep_gaps import gaps

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

# Long names for plots and sentences; the table uses metric_name's short ones.
METRIC_LABELS = {
    "final/val_ppl": "validation perplexity",
    "final/val_loss": "validation loss (nats/token)",
    "final/bleu": "test BLEU",
    "final/chrf": "test chrF",
}
LOWER_IS_BETTER = ("ppl", "loss")
MAX_KEY_COLUMNS = 5  # more swept keys than this: rows are named by their dir instead


def metric_name(key: str) -> str:
    """A results.json key as a column name: ``final/val_ppl`` → ``val ppl``, ``final/bleu`` → ``BLEU``."""
    name = key.removeprefix("final/").replace("_", " ")
    return {"bleu": "BLEU", "chrf": "chrF", "params": "parameters"}.get(name, name)


def column_decimals(values: list[Any]) -> int | None:
    """Decimals that show the column's largest float to 4 significant digits; None for ints."""
    floats = [abs(v) for v in values if isinstance(v, float) and math.isfinite(v)]
    return min(decimals_for(max(floats)), 6) if floats else None


def cell(value: Any, decimals: int | None) -> str:
    """A metric cell: floats to the column's decimals, everything else as ``fmt`` shows it."""
    if decimals is not None and isinstance(value, float) and math.isfinite(value):
        return f"{value:,.{decimals}f}"
    return fmt(value)


def runs_section(ctx: ReportContext) -> tuple[str, list[dict[str, Any]]]:
    """The table of every job: swept params, status, step, metrics, errors when there are any."""
    # A folder of different runs (a passkey folder: language model, passkey run, fine-tunes)
    # differs in many overrides: name each row by its dir, and list those keys as varying.
    named_by = ctx.named_by()
    by_key = 0 < len(named_by) <= MAX_KEY_COLUMNS
    keys = named_by if by_key else ["run"]
    jobs = sorted(
        ctx.jobs,
        key=lambda j: (*(natural_order(swept_value(j, k)) for k in named_by if by_key), j.name),
    )
    metric_keys: list[str] = list(dict.fromkeys(k for job in jobs for k in job.metrics))
    # A metric every completed run shares (the parameter count of one model) is a setting.
    constant = {
        k: values[0]
        for k in metric_keys
        if len(jobs) > 1
        and len(values := [j.metrics.get(k) for j in jobs if j.status == "completed"]) > 1
        and all(v == values[0] for v in values)
    }
    shown = [k for k in metric_keys if k not in constant]
    labels = [tuple(swept_value(j, k) for k in keys) if by_key else (j.name,) for j in jobs]
    # Rows that would look alike, or a row with no setting to show (a job dir killed before
    # Hydra wrote its overrides), get their folder: every row must name its job.
    with_dir = len(set(labels)) < len(labels) or any(not any(label) for label in labels)
    with_error = any(j.error for j in jobs)
    decimals = {k: column_decimals([j.metrics.get(k) for j in jobs]) for k in shown}
    names = short_names(keys)
    header = [names[k] for k in keys]
    header += [*(["dir"] if with_dir else []), "status", *map(metric_name, shown)]
    header += ["error"] if with_error else []
    rows, csv_rows = [], []
    for job, values in zip(jobs, labels, strict=True):
        metrics = job.metrics
        rows.append(
            [
                *values,
                *([job.name] if with_dir else []),
                job.status,
                *(cell(metrics.get(k), decimals[k]) for k in shown),
                *([job.error] if with_error else []),
            ]
        )
        csv_rows.append(
            {
                **dict(zip(keys, values, strict=True)),
                "status": job.status,
                **{k: metrics.get(k) for k in metric_keys},
                "error": job.error,
                "dir": job.name,
            }
        )
    align = ["l"] * (len(keys) + with_dir + 1) + ["r"] * len(shown) + ["l"] * with_error
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.status] = counts.get(job.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    if constant.get("step") is not None and all(
        j.flat_config.get("train.max_steps") == constant["step"] for j in jobs if j.config
    ):
        del constant["step"]  # every run trained to its max_steps: "steps" already says it
    extra = [f"{metric_name(k)} {fmt(v)}" for k, v in constant.items()]
    settings = settings_line(jobs, ctx.swept, extra)
    missing = gaps(ctx.target)  # runs the listing cannot show: deleted jobs, dangling links
    md = [
        f"{len(jobs)} run{'s' if len(jobs) != 1 else ''}: {summary}.",
        *(f"- {line}" for line in missing),
        "",
        *([settings, ""] if settings else []),
        md_table(header, rows, align),
    ]
    if by_key and (sentence := comparison_sentence(ctx, jobs)):
        md += ["", sentence]
    plot = runs_plot(ctx, jobs)
    if plot:
        md += ["", f"![final metric per run]({plot.name})"]
    return "\n".join(md), csv_rows


def settings_line(jobs: list[Job], swept: list[str], extra: list[str]) -> str:
    """The settings every run shares, and every setting or swept key that varies."""
    configs = [j.flat_config for j in jobs if j.config]
    if not configs:
        return ""
    fixed, varying = [], []

    def value(config: dict[str, Any], key: str) -> Any:
        # A synthetic run's data is its task (every task's source is "synthetic").
        return (
            config.get("data.task") or config.get(key) if key == "data.source" else config.get(key)
        )

    for key, name in SETTINGS:
        values = {repr(value(c, key)) for c in configs}
        if len(values) == 1:
            fixed.append(f"{name} {value(configs[0], key)}")
        else:
            varying.append(name)
    names = {key.removesuffix(".name") for key, _ in SETTINGS} | {n for _, n in SETTINGS}
    varying += [k for k in swept if k not in names and k not in varying]
    # Overrides every job was given alike that the list above does not show (pe.num_buckets=16).
    shared = [
        f"{k}={v}"
        for k, v in jobs[0].params.items()
        if k not in names
        and setting_key(k) not in swept
        and not is_plumbing(k)
        and all(j.params.get(k) == v for j in jobs)
    ]
    fixed += shared
    line = f"Fixed settings: {', '.join(fixed)}."
    line += f" Varying: {', '.join(varying)}." if varying and len(jobs) > 1 else ""
    # Results every run shares (most often by chance, or none learned): said apart from settings.
    return line + (f" The same in every run: {', '.join(extra)}." if extra else "")


def headline_metric(jobs: list[Job]) -> str | None:
    """The metric runs are compared by: validation ppl, else loss, else BLEU."""
    names = [k for j in jobs for k in j.metrics if k.startswith("final/")]
    for suffix in ("ppl", "loss", "bleu"):
        for key in names:
            if key.endswith(suffix):
                return key
    return None


def text_of(job: Job) -> str:
    """What a run's perplexity is per token of: its data, tokenizer and learned vocabulary."""
    flat = job.flat_config
    name = str(flat.get("tokenizer.name") or "byte")
    size = flat.get("tokenizer.vocab_size")
    tokens = f"{name} {size}" if name != "byte" and size else name
    return f"{flat.get('data.source') or 'data'} {tokens}"


def comparison_sentence(ctx: ReportContext, jobs: list[Job]) -> str:
    """Best vs worst setting on the headline metric, over seeds when seeds were swept."""
    key = headline_metric(jobs)
    if key is None:
        return ""
    texts = {text_of(job) for job in jobs}
    if "ppl" in key and len(texts) > 1:  # per token of one text: another's tokens differ
        return (
            f"{METRIC_LABELS.get(key, metric_name(key)).capitalize()} is not compared across "
            "these runs: "
            "it is per token, and they read different text or tokenize it differently "
            f"({', '.join(sorted(texts))})."
        )
    groups: dict[str, list[float]] = {}
    for job in jobs:
        value = job.metrics.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            groups.setdefault(ctx.label(job, exclude=("seed",)) or job.name, []).append(value)
    if len(groups) < 2:
        return ""
    lower = key.endswith(LOWER_IS_BETTER)
    stats = sorted(((*mean_std(v), len(v), g) for g, v in groups.items()), reverse=not lower)
    (m1, s1, n1, best), (m2, s2, n2, worst) = stats[0], stats[-1]
    n = min(n1, n2)
    digits = decimals_for(max(abs(m1), abs(m2)))
    gap = abs(m2 - m1)
    share = gap / abs(m1) if m1 else None
    relative = "" if share is None else f" ({share:.{1 if share >= 0.01 else 2}%})"
    mean = "mean " if n > 1 else ""
    verdict = rule(gap, [s1, s2], n)  # the one rule of every comparison (posexp.results.verdict)
    noise = verdict.words()
    if n == 1:
        noise += f"; one run per setting (sweep seed=0,1,2: a verdict needs {MIN_SEEDS} seeds)"
    # A best and a worst only where the rule decides; otherwise the extremes, unranked.
    high, low = (
        ("Best", "worst")
        if verdict.decided
        else (("Lowest", "highest") if lower else ("Highest", "lowest"))
    )
    return (
        f"{high} {METRIC_LABELS.get(key, metric_name(key))}: {best} ({mean}{m1:.{digits}f}); "
        f"{low}: {worst} ({mean}{m2:.{digits}f}), {gap:.{digits}f} apart{relative}: {noise}."
    )


def runs_plot(ctx: ReportContext, jobs: list[Job]) -> Path | None:
    """The final validation ppl (or loss) of each completed job, as points on a zoomed axis;
    none for fewer than two runs (one dot compares nothing)."""
    names = [k for j in jobs for k in j.metrics if k.startswith("final/")]
    candidates = [k for k in names if k.endswith("ppl")] + [k for k in names if k.endswith("loss")]
    for key in dict.fromkeys(candidates):
        points = [
            (ctx.label(j), j.metrics[key], j)
            for j in jobs
            if isinstance(j.metrics.get(key), (int, float)) and math.isfinite(j.metrics[key])
        ]
        if points:
            break
    else:
        return None
    if len(points) < 2:
        return None
    label = METRIC_LABELS.get(key, metric_name(key))
    names = ["\n".join(textwrap.wrap(name, 44)) or "?" for name, _, _ in points]
    values = [v for _, v, _ in points]
    # Runs of several encodings: each dot in its encoding's colour, as in every figure of the report.
    pes = [job_pe(j) if getattr(j.config, "pe", None) else None for _, _, j in points]
    shared = pe_colors(ctx) if None not in pes and len(set(pes)) > 1 else {}
    colors = [shared.get(pe, "tab:blue") for pe in pes]
    shown = repr((label, names, values, colors))
    return ctx.figure(
        "report_runs.png",
        shown,
        lambda: draw_runs(label, names, [float(v) for v in values], colors),
    )


def draw_runs(label: str, names: list[str], values: list[float], colors: list[str]) -> Any:
    """The runs figure: one dot per run, down the y axis, on a zoomed x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    digits = column_decimals(values) or 0
    lines = sum(n.count("\n") + 1 for n in names)
    # tight_layout, not constrained layout: the latter collapsed past ~40 rows (a warning).
    fig, ax = plt.subplots(figsize=(7.5, 1.4 + 0.3 * lines + 0.15 * len(values)))
    # Runs down the y axis (their labels stay readable), points on a zoomed x axis: the
    # differences between runs are what a reader compares, not the distance from 0.
    ys = list(range(len(values)))[::-1]
    ax.scatter(values, ys, c=colors, s=49, zorder=2)
    for y, v in zip(ys, values, strict=True):
        ax.annotate(
            f"{v:.{digits}f}",
            (v, y),
            textcoords="offset points",
            xytext=(7, 0),
            va="center",
            fontsize=8,
        )
    low, high = min(values), max(values)
    pad = (high - low) * 0.1 or abs(high) * 0.05 or 1.0
    ax.set_xlim(low - pad, high + 2.5 * pad)
    ax.set_ylim(-0.6, len(values) - 0.4)
    ax.set_yticks(ys, names, fontsize=8)
    ax.set_xlabel(label + (" (axis not from 0)" if low - pad > 0 else ""))
    ax.set_title(f"Final {label} per run", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
