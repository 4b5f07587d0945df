"""The report's RULER view: task × length scores, depth heat maps and effective lengths.

For runs of RULER-style tasks (``experiment=ruler``, or one task such as ``data=niah_multikey``)
scored by ``posexp eval-extrapolate``. A row is a model (the settings that vary across the
report's runs, less the seed) with one evaluation method. Each cell is RULER's
string_match_all score, averaged over needle depths per seed, then mean ± sample std over seeds.

Effective length (RULER's summary, with a rule for tiny models): RULER counts a length as
effective while a model's task average stays at or above a reference model's score at its base
length. Here the reference is the best row of the report at the training length (1×), and the
threshold is ``data.threshold`` (default 0.9) times its task average; a row's effective length
is the longest context, in tokens, up to which every tested length meets the threshold.
"""

from __future__ import annotations

import math
import re
from typing import Any

from posexp.commands.report.depth_maps import depth_maps
from posexp.commands.report.jobs import Job
from posexp.commands.report.stats import mean_std, mean_std_text
from posexp.commands.report.view import ReportContext, md_table, register_report_view
from posexp.commands.report.views.tasks import task_of, task_view

VIEW = "ruler"  # the view RULER tasks name as their report_view (posexp/data/synthetic)
DEFAULT_THRESHOLD = 0.9
AVERAGE = "average"
# row -> task -> (depth, size) -> seed -> score
Scores = dict[str, dict[str, dict[tuple[float | None, int], dict[int, float]]]]


def ruler_jobs(jobs: list[Job]) -> list[Job]:
    """Jobs of RULER tasks with string_match_all records."""
    return [
        j
        for j in jobs
        if j.extrapolate
        and task_view(j) == VIEW
        and any(r.get("metric") == "score" for r in j.extrapolate)
    ]


def collect(ctx: ReportContext, jobs: list[Job]) -> Scores:
    """Every score by row (model and method), task, (depth, size) and seed."""
    out: Scores = {}
    for job in jobs:
        model = ctx.label(job, exclude=("seed",))
        seed = int(job.config.seed) if job.config else 0
        for r in job.extrapolate:
            if r.get("metric") != "score" or r.get("score") is None:
                continue
            row = f"{model} · {r['method']}" if model else r["method"]
            task = r.get("task") or task_of(job)
            cell = out.setdefault(row, {}).setdefault(task, {})
            cell.setdefault((r.get("depth"), int(r["length"])), {})[seed] = float(r["score"])
    return out


def per_seed(
    cells: dict[tuple[float | None, int], dict[int, float]], size: int
) -> dict[int, float]:
    """Seed -> score at ``size``, averaged over the depths that seed was scored at."""
    by_seed: dict[int, list[float]] = {}
    for (_, n), seeds in cells.items():
        if n == size:
            for seed, v in seeds.items():
                by_seed.setdefault(seed, []).append(v)
    return {s: sum(v) / len(v) for s, v in sorted(by_seed.items())}


def task_average(tasks: dict[str, Any], size: int) -> dict[int, float]:
    """Seed -> mean over tasks at ``size``, for the seeds that scored every task there."""
    per_task = [per_seed(cells, size) for cells in tasks.values()]
    seeds = set.intersection(*(set(p) for p in per_task)) if per_task else set()
    return {s: sum(p[s] for p in per_task) / len(per_task) for s in sorted(seeds)}


def effective_length(
    means: dict[int, float], threshold: float, context: dict[int, int]
) -> int | None:
    """The longest context up to which every tested size's mean meets ``threshold`` (None:
    not even the shortest does, or the threshold is 0: no model learned the tasks)."""
    best = None
    if not threshold > 0:
        return None
    for size in sorted(means):
        if not means[size] >= threshold:
            break
        best = context[size]
    return best


def task_sentence(
    tasks: dict[str, Any], base: int, last: int, context: dict[int, int], row: str
) -> str:
    """Which tasks ``row`` does best and worst at the training length, and what is left of
    each at the longest length (seed means)."""
    at = {t: mean_std(list(per_seed(c, base).values()))[0] for t, c in tasks.items()}
    far = {t: mean_std(list(per_seed(c, last).values()))[0] for t, c in tasks.items()}
    if len(at) < 2 or last == base:
        return ""
    ranked = sorted(at, key=lambda t: -at[t])
    kept = ", ".join(f"{t} {at[t]:.2f} → {far[t]:.2f}" for t in ranked)
    return (
        f"\n- {row}, by task at {context[base]:,} → {context[last]:,} tokens (seed means): {kept}."
    )


def threshold_fraction(jobs: list[Job]) -> float:
    """``data.threshold`` of the runs (a mixture's option), else the default."""
    values = {float(j.config.data.params.get("threshold", DEFAULT_THRESHOLD)) for j in jobs}
    return max(values)


def plot_average(
    ctx: ReportContext,
    averages: dict[str, dict[int, dict[int, float]]],
    context: dict[int, int],
    l0: int,
    threshold: float,
    n_text: str,
) -> Any:
    """Task average against context length, one line per row with seed spread; the threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.commands.extrapolate.plots import gapped, not_scored

    fig, ax = plt.subplots(figsize=(8.5, 4.8), layout="constrained")
    # The sizes some row has a task average at (a mixture has none below a task's smallest size).
    sizes = sorted({s for by_size in averages.values() for s, v in by_size.items() if v})
    xs = [context[s] for s in sizes]
    for row, by_size in averages.items():
        stats = {context[s]: mean_std(list(v.values())) for s, v in by_size.items() if v}
        at, means, lacks = gapped({x: m for x, (m, _) in stats.items()}, xs)
        ax.errorbar(
            at,
            means,
            yerr=[stats.get(x, (0.0, math.nan))[1] for x in at],
            marker="o",
            capsize=3,
            label=row + not_scored(lacks),
        )
    ax.axhline(
        threshold,
        color="grey",
        linestyle="--",
        linewidth=1,
        label=f"effective-length threshold ({threshold:.2f})",
    )
    ax.axvline(l0, color="grey", linestyle=":", linewidth=1, label=f"training length ({l0:,})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x:,}" for x in xs])
    ax.minorticks_off()
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("RULER score, mean over tasks")
    ax.set_title(f"RULER-style tasks: mean score by context length ({n_text})", fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside right center", fontsize=8)
    return ctx.save_figure(fig, "report_ruler.png")


def file_stems(rows: list[str]) -> dict[str, str]:
    """Each row's label as a file name part (``rope · yarn`` -> ``rope_yarn``), unique: a label
    that comes out like an earlier one gets its position appended."""
    stems: dict[str, str] = {}
    for k, row in enumerate(rows):
        stem = re.sub(r"[^A-Za-z0-9.=+-]+", "_", row).strip("_") or str(k)
        stems[row] = f"{stem}_{k}" if stem in stems.values() else stem
    return stems


def heat_map(
    ctx: ReportContext,
    stem: str,
    row: str,
    tasks: dict[str, Any],
    context: dict[int, int],
    l0: int,
    n_text: str,
) -> Any:
    """One depth × length heat map per task with needle depths, for one row (seed mean)."""
    with_depth = {t: c for t, c in tasks.items() if any(d is not None for d, _ in c)}
    if not with_depth:
        return None
    title = f"{row}: score by needle depth and context length ({n_text})"
    labels = ("needle depth", "string_match_all score", title)
    return depth_maps(ctx, with_depth, context, l0, labels, f"report_ruler_depths_{stem}.png")


def render(ctx: ReportContext) -> str:
    """The section's Markdown, its CSV and figures."""
    from posexp.data.synthetic import make_data

    jobs = ruler_jobs(ctx.jobs)
    scores = collect(ctx, jobs)
    data = make_data(**jobs[0].config.data.params)
    l0 = data.longest_train_row()
    sizes = sorted({s for tasks in scores.values() for c in tasks.values() for _, s in c})
    context = {s: data.task.scored_row_tokens(s) for s in sizes}
    base = min(sizes, key=lambda s: abs(context[s] - l0))
    averages = {row: {s: task_average(tasks, s) for s in sizes} for row, tasks in scores.items()}
    means = {
        row: {s: mean_std(list(v.values()))[0] for s, v in a.items() if v}
        for row, a in averages.items()
    }
    reference = max(means, key=lambda row: means[row].get(base, float("-inf")))
    fraction = threshold_fraction(jobs)
    threshold = fraction * means[reference].get(base, 0.0)
    counts = {len(v) for a in averages.values() for v in a.values() if v}
    n_text = "n = " + ("–".join(map(str, sorted({min(counts), max(counts)}))) if counts else "0")
    header = [*(f"{context[s]:,} ({context[s] / l0:.3g}×)" for s in sizes)]

    def cell(values: dict[int, float]) -> str:
        return mean_std_text(*mean_std(list(values.values())), len(values), 2)

    summary = []
    for row in scores:
        eff = effective_length(means[row], threshold, context)
        summary.append(
            [
                row,
                *(cell(averages[row][s]) for s in sizes),
                "< shortest" if eff is None else f"{eff:,}",
            ]
        )
    per_task = []
    csv = []
    for row, tasks in scores.items():
        for task, cells in tasks.items():
            per_task.append([row, task, *(cell(per_seed(cells, s)) for s in sizes)])
            csv += [
                {
                    "row": row,
                    "task": task,
                    "context": context[n],
                    "depth": d,
                    "seed": seed,
                    "score": v,
                }
                for (d, n), seeds in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0] or 0))
                for seed, v in sorted(seeds.items())
            ]
    path = ctx.write_csv(
        "report_ruler.csv", csv, ["row", "task", "context", "depth", "seed", "score"]
    )
    png = plot_average(ctx, averages, context, l0, threshold, n_text)
    stems = file_stems(list(scores))
    maps = [
        heat_map(ctx, stems[row], row, tasks, context, l0, n_text) for row, tasks in scores.items()
    ]
    best = max(scores, key=lambda r: effective_length(means[r], threshold, context) or 0)
    best_eff = effective_length(means[best], threshold, context)
    reading = (
        f"- Threshold: {fraction:g} × the task average of {reference} at {context[base]:,} "
        f"tokens ({means[reference][base]:.3f}) = {threshold:.3f}."
    )
    if best_eff is not None:
        reading += f" The longest effective length is {best_eff:,} tokens ({best})."
    elif not threshold > 0:
        reading += " No model scores above 0 at the training length: no effective length."
    scored = {n for c in scores[reference].values() for _, n in c}
    reading += task_sentence(scores[reference], base, max(scored), context, reference)
    return "\n".join(
        [
            "## RULER-style tasks",
            "",
            f"string_match_all score (share of required items in the greedy answer), mean over "
            f"tasks and needle depths; training rows of L0 = {l0} tokens; mean ± sample std over "
            f"{n_text} seed(s). Effective length: the longest context up to which every tested "
            f"length keeps the mean at or above the threshold.",
            "",
            md_table(
                ["model · method", *header, "effective length"],
                summary,
                ["l", *"r" * len(sizes), "r"],
            ),
            "",
            reading,
            "",
            f"![mean score by context length]({png.name})",
            "",
            "Per task:",
            "",
            md_table(["model · method", "task", *header], per_task, ["l", "l", *"r" * len(sizes)]),
            "",
            *(
                f"![depth heat maps, {row}]({m.name})\n"
                for row, m in zip(scores, maps, strict=True)
                if m
            ),
            f"Data: `{path.name}`.",
        ]
    )


register_report_view(VIEW, lambda jobs: bool(ruler_jobs(jobs)), render, order=14)
