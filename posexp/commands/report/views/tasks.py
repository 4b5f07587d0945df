"""The report's length-generalization view: exact-match accuracy against test size, per PE.

For sweeps of synthetic-task runs (``experiment=length_generalization``): one table per task
(rows = test size, columns = PE), a summary of mean accuracy on sizes past the training range,
reading sentences computed from that summary and set against the papers' findings
(``configs/findings.yaml``), and a figure with one panel per task and one line per PE
(Kazemnejad et al. 2023's layout). Passkey runs have their own view (``passkey.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from posexp.commands.report.jobs import Job, swept_value
from posexp.commands.report.stats import beyond_noise, mean_std, mean_std_text
from posexp.commands.report.view import ReportContext, fmt, md_table, register_report_view
from posexp.commands.report.views.findings import findings, job_pe, selects
from posexp.pe.base import PEDisplay, describe_pe


def task_records(job: Job) -> list[dict[str, Any]]:
    """The job's accuracy records without extension methods and key depths ([] for text runs)."""
    return [
        r
        for r in job.extrapolate or []
        if r.get("metric") == "accuracy" and r["method"] == "none" and r.get("depth") is None
    ]


def task_of(job: Job) -> str:
    """The job's task name."""
    return str(job.config.data.params.get("task")) if job.config else "?"


def task_label(job: Job) -> str:
    """The task as swept (``addition_lsb`` stays apart from ``addition``), else its name."""
    return str(job.params.get("data") or task_of(job))


def train_sizes(job: Job) -> tuple[int, int]:
    """The job's training size range."""
    lo, hi = job.config.data.params.get("train_lengths", (1, 1))
    return int(lo), int(hi)


Column = Callable[[Job], PEDisplay]


def column_key(ctx: ReportContext) -> Column:
    """What a table column is: the PE, and every other swept setting but the task and the seed
    (a sweep over ``pe.max_distance`` gets one column per value, not a mean over them)."""
    others = [k for k in ctx.swept if k not in ("data", "seed", "pe")]

    def key(job: Job) -> PEDisplay:
        pe = job_pe(job)
        values = [f"{k}={swept_value(job, k)}" for k in others]
        return replace(pe, label=f"{pe.label} ({', '.join(values)})") if values else pe

    return key


def collect(jobs: list[Job], key: Column = job_pe) -> dict[str, dict[PEDisplay, dict[int, float]]]:
    """task -> PE (randomized positions apart) -> size -> accuracy (mean over seeds)."""
    sums: dict[tuple[str, PEDisplay, int], list[float]] = {}
    for job in jobs:
        for r in task_records(job):
            if r.get("accuracy") is not None:
                sums.setdefault((task_label(job), key(job), r["length"]), []).append(r["accuracy"])
    out: dict[str, dict[PEDisplay, dict[int, float]]] = {}
    for task, pe, size in sorted(sums, key=lambda k: (k[0], k[1].sort_key, k[2])):
        values = sums[task, pe, size]
        out.setdefault(task, {}).setdefault(pe, {})[size] = sum(values) / len(values)
    return out


def seeds_caption(counts: list[int]) -> str:
    """How many seeds a summary cell averages (``counts``: the sorted distinct numbers)."""
    if not counts or counts[-1] <= 1:
        return "one seed per PE (no spread: sweep `seed=0,1,2` for mean ± std)."
    shown = str(counts[0]) if counts[0] == counts[-1] else f"{counts[0]}–{counts[-1]}"
    return f"mean ± sample std over n = {shown} seeds."


def seed_summary(
    jobs: list[Job], top: int, key: Column = job_pe
) -> dict[str, dict[PEDisplay, list[float]]]:
    """task -> PE -> each seed's (job's) mean accuracy over the sizes past the training range."""
    out: dict[str, dict[PEDisplay, list[float]]] = {}
    for job in jobs:
        values = [
            r["accuracy"]
            for r in task_records(job)
            if r.get("accuracy") is not None and r["length"] > top
        ]
        if values:
            per_pe = out.setdefault(task_label(job), {})
            per_pe.setdefault(key(job), []).append(sum(values) / len(values))
    return out


def spread_sentence(task: str, seeds: dict[PEDisplay, list[float]]) -> str:
    """Whether the best PE's lead over the second past the training sizes exceeds seed noise."""
    if len(seeds) < 2:
        return ""
    stats = sorted(((*mean_std(v), len(v), pe) for pe, v in seeds.items()), key=lambda x: -x[0])
    (m1, s1, n1, a), (m2, s2, n2, b) = stats[0], stats[1]
    words = beyond_noise(m1 - m2, [s1, s2], min(n1, n2))
    return (
        f"- **{task}**: {a.label} leads {b.label} past the training sizes by {m1 - m2:.3f}: "
        f"{words}."
    )


def ordered(pes: Any) -> list[PEDisplay]:
    """PEs in the order they declare (posexp/pe), unknown ones last."""
    return sorted(pes, key=lambda p: p.sort_key)


def beyond_means(table: dict[Any, dict[int, float]], top: int) -> dict[Any, float]:
    """Per PE, mean accuracy over the sizes past the training range."""
    out = {}
    for pe, by_size in table.items():
        values = [a for n, a in by_size.items() if n > top]
        if values:
            out[pe] = sum(values) / len(values)
    return out


def leaders(scores: dict[Any, float], best: bool) -> list[Any]:
    """The PEs tied at the top (or bottom) of ``scores``."""
    edge = max(scores.values()) if best else min(scores.values())
    return [p for p, v in scores.items() if abs(v - edge) < 1e-9]


def names(pes: list[PEDisplay], sep: str = ", ") -> str:
    """PE labels joined for a sentence."""
    return sep.join(p.label for p in ordered(pes))


def reading(summary: dict[str, dict[PEDisplay, float]]) -> list[str]:
    """Sentences computed from the summary (task -> PE -> mean accuracy past training sizes),
    then one per published finding (configs/findings.yaml) set against it."""
    lines = []
    spread = {t: s for t, s in summary.items() if s and max(s.values()) - min(s.values()) >= 0.01}
    for t, s in summary.items():
        if not s:
            continue
        if len(s) == 1:
            ((pe, score),) = s.items()
            lines.append(
                f"- **{t}**: {pe.label} scores {score:.2f} past the training sizes "
                f"(the only PE run on it: nothing to compare)."
            )
            continue
        if t not in spread:
            lines.append(
                f"- **{t}**: every PE scores {max(s.values()):.2f} past the training sizes; "
                f"this budget does not separate them."
            )
            continue
        top, low = leaders(s, True), leaders(s, False)
        lines.append(
            f"- **{t}**: best past the training sizes {names(top)} ({s[top[0]]:.2f}), "
            f"worst {names(low)} ({s[low[0]]:.2f})."
        )
    for finding in findings()["length_generalization"]:
        compare = rank_comparison if finding["compare"] == "ranks" else randomized_comparison
        here = compare(finding, summary, spread)
        if here:
            lines.append(f"- {finding['cite']} find {finding['finding']}: {here}.")
    return lines


def rank_comparison(
    finding: dict[str, Any],
    summary: dict[str, dict[PEDisplay, float]],
    spread: dict[str, dict[PEDisplay, float]],
) -> str:
    """How often the PEs a finding ranks best (worst) lead (trail) here; '' if none was run
    or no task separates its PEs."""
    if not spread:
        return ""
    measured = {p for s in summary.values() for p in s}
    parts = []
    for side, where in (("best", "is the best"), ("worst", "among the worst")):
        named = [p for p in measured if side in finding and selects(finding[side], p)]
        if named:
            k = sum(1 for s in spread.values() if set(named) & set(leaders(s, side == "best")))
            parts.append(f"{names(named, ' or ')} {where} on {k} of {len(spread)}")
    if not parts:
        return ""
    return f"here {', and '.join(parts)} task(s) where the PEs differ by at least 0.01"


def randomized_comparison(
    finding: dict[str, Any],
    summary: dict[str, dict[PEDisplay, float]],
    spread: dict[str, dict[PEDisplay, float]],
) -> str:
    """Per PE run both ways, accuracy with randomized positions minus without; '' if none was."""
    clauses = []
    for plain in ordered({p for s in summary.values() for p in s if not p.randomized}):
        randomized = describe_pe(plain.name, randomized=True)
        pairs = [
            (t, s[randomized] - s[plain])
            for t, s in summary.items()
            if plain in s and randomized in s
        ]
        if pairs:
            gains = ", ".join(f"{t} {d:+.3f}" for t, d in pairs)
            up = sum(d > 0 for _, d in pairs)
            clauses.append(
                f"{randomized.label} minus {plain.label}, past the training sizes: "
                f"{gains} (higher on {up} of {len(pairs)} tasks)"
            )
    return "; ".join(clauses)


def frontier(table: dict[Any, dict[int, float]], level: float = 0.5) -> dict[Any, int | None]:
    """Per PE, the largest test size answered with at least ``level`` accuracy."""
    return {
        pe: max((n for n, a in by.items() if a >= level), default=None) for pe, by in table.items()
    }


def plot(
    ctx: ReportContext, data: dict[str, dict[PEDisplay, dict[int, float]]], top: tuple[int, int]
) -> Any:
    """One panel per task, accuracy against size, one line per PE, training sizes shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.commands.extrapolate.plots import DASHES, MARKERS

    tasks = list(data)
    # One style per PE across panels (tasks may have been run with different PEs), so that the
    # one legend holds for every panel.
    style = {pe: i for i, pe in enumerate(ordered({p for table in data.values() for p in table}))}
    # Tall enough for the legend beside the panels (one line per PE, and the training span).
    height = max(4.2, 0.27 * (len(style) + 1) + 1.2)
    fig, axes = plt.subplots(
        1,
        len(tasks),
        figsize=(4.6 * len(tasks) + 2.4, height),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        sizes = sorted({n for by in data[task].values() for n in by})
        for pe in ordered(data[task]):
            pts, i = sorted(data[task][pe].items()), style[pe]
            ax.plot(
                *zip(*pts, strict=True),
                marker=MARKERS[i % len(MARKERS)],
                color=f"C{i % 10}",
                linestyle=DASHES[i % len(DASHES)],
                label=pe.label,
            )
        ax.axvspan(
            top[0], top[1], color="grey", alpha=0.12, label=f"training sizes {top[0]}–{top[1]}"
        )
        ax.set_xticks(sizes)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(task, fontsize=11)
        ax.set_xlabel("test size (symbols / digits per operand)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("exact-match accuracy")
    legend: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    lines = [pe.label for pe in style]
    shown = lines + [label for label in legend if label not in lines]  # then the shaded span
    # Centred beside the panels, below the title's line; one panel's title takes two lines.
    fig.legend([legend[label] for label in shown], shown, loc="outside right center", fontsize=9)
    gap = "\n" if len(tasks) == 1 else " "
    fig.suptitle(
        f"Length generalization:{gap}test accuracy against size, per positional encoding",
        fontsize=11,
    )
    return ctx.save_figure(fig, "report_length_generalization.png")


def render(ctx: ReportContext) -> str:
    """The section's Markdown (and its CSV and figure)."""
    jobs = [j for j in ctx.jobs if task_records(j) and task_of(j) != "passkey"]
    key = column_key(ctx)
    data = collect(jobs, key)
    top = train_sizes(jobs[0])
    examples = max((r.get("examples") or 0) for j in jobs for r in task_records(j))
    out = [
        "## Length generalization (exact-match accuracy)",
        "",
        f"Trained on sizes {top[0]}–{top[1]}; {examples} fixed test instances per size; greedy "
        f"answers scored by exact match; no extension method. Sizes marked * were trained on.",
        "",
    ]
    rows_csv, summary = [], {}
    for task, table in data.items():
        pes = ordered(table)
        sizes = sorted({n for by in table.values() for n in by})
        rows = [
            [
                f"{n}{'*' if top[0] <= n <= top[1] else ''}",
                *(accuracy_cell(table[p].get(n)) for p in pes),
            ]
            for n in sizes
        ]
        out += [
            f"### {task}",
            "",
            md_table(["size", *(p.label for p in pes)], rows, ["l", *"r" * len(pes)]),
            "",
        ]
        rows_csv += [
            {
                "task": task,
                "pe": p.name,
                "randomized": p.randomized,
                "size": n,
                "accuracy": table[p].get(n),
            }
            for p in pes
            for n in sizes
        ]
        summary[task] = beyond_means(table, top[1])
    all_pes = ordered({p for s in summary.values() for p in s})
    header = ["task", *(p.label for p in all_pes)]
    reach = {t: frontier(table) for t, table in data.items()}
    seeds = seed_summary(jobs, top[1], key)
    counts = sorted({len(v) for by_pe in seeds.values() for v in by_pe.values()})
    out += [
        "### Mean accuracy past the training sizes",
        "",
        "Each seed's mean over the sizes past training, then " + seeds_caption(counts),
        "",
        md_table(
            header,
            [[t, *(summary_cell(seeds.get(t, {}).get(p)) for p in all_pes)] for t in summary],
            ["l", *"r" * len(all_pes)],
        ),
        "",
        "### Largest test size answered with at least 50% accuracy",
        "",
        md_table(
            header,
            [[t, *(fmt(r.get(p)) for p in all_pes)] for t, r in reach.items()],
            ["l", *"r" * len(all_pes)],
        ),
        "",
        "Reading the tables:",
        "",
        *reading(summary),
        *filter(None, (spread_sentence(t, seeds.get(t, {})) for t in summary)),
        "",
    ]
    csv = ctx.write_csv(
        "report_length_generalization.csv",
        rows_csv,
        ["task", "pe", "randomized", "size", "accuracy"],
    )
    png = plot(ctx, data, top)
    out += [f"![accuracy against size]({png.name})", "", f"Data: `{csv.name}`."]
    return "\n".join(out)


def accuracy_cell(value: float | None) -> str:
    """An accuracy with 2 decimals (0.50 beside 0.51), '—' when not measured."""
    return "—" if value is None else f"{value:.2f}"


def summary_cell(values: list[float] | None) -> str:
    """Mean ± std of the seeds' values to 3 places (the mean alone for one seed)."""
    if not values:
        return "—"
    return mean_std_text(*mean_std(values), len(values), 3)


register_report_view(
    "length_generalization",
    lambda jobs: any(task_records(j) and task_of(j) != "passkey" for j in jobs),
    render,
    order=12,
)
