"""The report's RULER view: task × length scores, depth heat maps and effective lengths.

For runs of RULER-style tasks (``experiment=ruler``, or one task such as ``data=niah_multikey``)
scored by ``posexp eval-extrapolate``. A row is a model (the settings that vary across the
report's runs, less the seed) with one evaluation method. Each cell is RULER's
string_match_all score, averaged per seed over the needle depths every cell of its task was
scored at (``common_depths``; the caption names them and the cells with more), then mean ± sample
std over seeds.

Effective length (RULER's summary, with a rule for tiny models): RULER counts a length as
effective while a model's task average stays at or above a reference model's score at its base
length. Here the reference is the best row of the report at the training length (1×), and the
threshold is ``data.threshold`` (default 0.9) times its task average; a row's effective length
is the longest context, in tokens, up to which every tested length meets the threshold.
"""

from __future__ import annotations

import re
from typing import Any

from posexp.commands.report.depth_maps import depth_maps
from posexp.commands.report.jobs import Job
from posexp.commands.report.stats import mean_std, mean_std_text
from posexp.commands.report.view import ReportContext, md_table, register_report_view
from posexp.commands.report.views.tasks import task_of, task_view
from posexp.results.depths import (
    MARK,
    DepthMeans,
    common_depths,
    depths_note,
    depths_phrase,
    depths_text,
)

VIEW = "ruler"  # the view RULER tasks name as their report_view (posexp/data/synthetic)
DEFAULT_THRESHOLD = 0.9
AVERAGE = "average"
# row -> task -> (depth, size) -> seed -> score
Scores = dict[str, dict[str, dict[tuple[float | None, int], dict[int, float]]]]
# row -> task -> size -> seed -> score over the task's common depths
Means = dict[str, dict[str, dict[int, dict[int, float]]]]
Depths = DepthMeans[tuple[str, int, int]]  # per (row, size, seed)


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


def depth_means(scores: Scores) -> tuple[Means, dict[str, Depths]]:
    """Each seed's score per row, task and size, averaged over the needle depths every row and
    size of that task was scored at (``common_depths``, one set per task), and those per task."""
    out: Means = {row: {task: {} for task in tasks} for row, tasks in scores.items()}
    found: dict[str, Depths] = {}
    for task in dict.fromkeys(t for tasks in scores.values() for t in tasks):
        units: dict[tuple[str, int, int], dict[float | None, float]] = {}
        for row, tasks in scores.items():
            for (d, n), seeds in tasks.get(task, {}).items():
                for seed, v in seeds.items():
                    units.setdefault((row, n, seed), {})[d] = v
        found[task] = common_depths(units)
        for row, n, seed in sorted(found[task].means, key=lambda k: (k[1], k[2])):
            out[row][task].setdefault(n, {})[seed] = found[task].means[row, n, seed]
    return out, found


def task_average(tasks: dict[str, dict[int, dict[int, float]]], size: int) -> dict[int, float]:
    """Seed -> mean over tasks at ``size`` (``tasks``: task -> size -> seed -> score), for the
    seeds that scored every task there."""
    per_task = [by_size.get(size, {}) for by_size in tasks.values()]
    seeds = set.intersection(*(set(p) for p in per_task)) if per_task else set()
    return {s: sum(p[s] for p in per_task) / len(per_task) for s in sorted(seeds)}


def marked(found: dict[str, Depths], row: str, size: int, task: str | None = None) -> str:
    """``MARK`` where a seed of ``row`` at ``size`` (in ``task``, else in any task) averages its
    own depths, not its task's common ones; else ""."""
    return MARK * any(
        k[:2] == (row, size) for t, d in found.items() if task in (None, t) for k in d.own
    )


def marked_note(sizes: list[int], context: dict[int, int]) -> str:
    """A legend's note on a line's points marked ``MARK``: `` († at 1,010: other depths)``."""
    if not sizes:
        return ""
    return f" ({MARK} at {', '.join(f'{context[s]:,}' for s in sizes)}: other needle depths)"


def depth_caption(found: dict[str, Depths]) -> str:
    """The needle depths the cells average (tasks without depths left out): ``needle depths 0,
    0.5, 1, the ones every cell was scored at``, per task where tasks differ."""
    sets = {t: d.depths for t, d in found.items() if any(x is not None for x in d.depths)}
    if not sets:
        return "no needle depths"
    if len(set(sets.values())) == 1:
        text = depths_phrase(next(iter(sets.values())), "needle depth")
    else:
        text = "needle depths " + "; ".join(f"{t} {depths_text(d)}" for t, d in sets.items())
    if any(d.own for d in found.values()):
        return f"{text}, those most cells were scored at ({MARK}: a cell's own needle depths)"
    return f"{text}, the ones every cell was scored at"


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
    tasks: dict[str, dict[int, dict[int, float]]],
    base: int,
    last: int,
    context: dict[int, int],
    row: str,
) -> str:
    """Which tasks ``row`` does best and worst at the training length, and what is left of
    each at the longest length (seed means; ``tasks``: task -> size -> seed -> score)."""
    at = {t: mean_std(list(c.get(base, {}).values()))[0] for t, c in tasks.items()}
    far = {t: mean_std(list(c.get(last, {}).values()))[0] for t, c in tasks.items()}
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
    marks: dict[str, list[int]],
) -> Any:
    """Task average against context length, one line per row with seed spread; the threshold.
    ``marks``: row -> sizes whose average is of other depths (``MARK``), named in its legend;
    drawn by ``posexp.results.curves``."""
    from posexp.results.curves import Curve, Guide, Panel, plot_scores
    from posexp.results.style import Style

    curves = []
    for i, (row, by_size) in enumerate(averages.items()):
        stats = {context[s]: mean_std(list(v.values())) for s, v in by_size.items() if v}
        curves.append(
            Curve(
                row,
                {x: m for x, (m, _) in stats.items()},
                Style(f"C{i % 10}", "o", "-"),
                "-",
                errors={x: sd for x, (_, sd) in stats.items()},
                note=marked_note(marks.get(row, []), context),
            )
        )
    guides = [
        Guide("y", (threshold,), f"effective-length threshold ({threshold:.2f})"),
        Guide("x", (l0,), f"training length ({l0:,})", ":"),
    ]
    fig = plot_scores(
        [Panel("", curves)],
        f"RULER-style tasks: mean score by context length ({n_text})",
        "RULER score, mean over tasks",
        "context length (tokens)",
        guides,
        log_x=True,
        width=6.1,
    )
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
    by_task, found = depth_means(scores)
    averages = {row: {s: task_average(tasks, s) for s in sizes} for row, tasks in by_task.items()}
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

    # Task averages with a task's cell over other depths than its common ones (only where
    # there is an average: a size where some task is unscored has none to mark).
    marks = {
        row: [s for s in sizes if averages[row][s] and marked(found, row, s)] for row in scores
    }
    summary = []
    for row in scores:
        eff = effective_length(means[row], threshold, context)
        summary.append(
            [
                row,
                *(cell(averages[row][s]) + MARK * (s in marks[row]) for s in sizes),
                ("< shortest" if eff is None else f"{eff:,}") + MARK * bool(marks[row]),
            ]
        )
    per_task = []
    csv = []
    for row, tasks in scores.items():
        for task, cells in tasks.items():
            per_task.append(
                [
                    row,
                    task,
                    *(
                        cell(by_task[row][task].get(s, {})) + marked(found, row, s, task)
                        for s in sizes
                    ),
                ]
            )
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
    png = plot_average(ctx, averages, context, l0, threshold, n_text, marks)
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
    reading += task_sentence(by_task[reference], base, max(scored), context, reference)
    notes = [
        depths_note(d, lambda k: (k[0], f"{context[k[1]]:,}"), " tokens", "needle depth", task)
        for task, d in found.items()
    ]
    return "\n".join(
        [
            "## RULER-style tasks",
            "",
            f"string_match_all score (share of required items in the greedy answer), mean over "
            f"tasks and over {depth_caption(found)}; training rows of L0 = {l0} tokens; mean ± "
            f"sample std over {n_text} seed(s). Effective length: the longest context up to which "
            f"every tested length keeps the mean at or above the threshold"
            + (
                f" ({MARK}: from a mean over other depths)."
                if any(d.own for d in found.values())
                else "."
            )
            + "".join(f" {note}" for note in notes if note),
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
