"""The report's length-generalization view: exact-match accuracy against test size, per PE.

For sweeps of synthetic-task runs (``experiment=length_generalization``): one table per task
(rows = test size, columns = PE), a summary of mean accuracy on sizes past the training range,
reading sentences computed from that summary and set against the papers' findings
(``configs/findings.yaml``), and a figure with one panel per task and one line per PE
(Kazemnejad et al. 2023's layout). Where the records carry per-token accuracy (the share of
answer tokens predicted right, the metric of Delétang et al. and Ruoss et al.), a second summary
gives it past the training sizes, and Ruoss et al.'s claim gets its verdict on their metric over
every task, as they averaged it. Passkey runs have their own view (``passkey.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from posexp.commands.report.jobs import Job
from posexp.commands.report.stats import mean_std, mean_std_text
from posexp.commands.report.view import ReportContext, fmt, md_table, register_report_view
from posexp.commands.report.views.findings import findings, job_pe, selects
from posexp.commands.report.views.tasks_plot import ordered, plot
from posexp.extension import baseline_method
from posexp.pe.base import PEDisplay, describe_pe
from posexp.results.verdict import paired, rule


def task_records(job: Job) -> list[dict[str, Any]]:
    """The job's accuracy records without extension methods and key depths ([] for text runs)."""
    return [
        r
        for r in job.extrapolate or []
        if r.get("metric") == "accuracy"
        and r["method"] == baseline_method()
        and r.get("depth") is None
    ]


VIEW = "length_generalization"  # the view a task names as its report_view (posexp/data/synthetic)


def task_of(job: Job) -> str:
    """The job's task name."""
    return str(job.config.data.params.get("task")) if job.config else "?"


def task_view(job: Job) -> str:
    """The report view the job's task declares it is shown in ('' for an unknown task)."""
    from posexp.data.synthetic import TASKS

    name = task_of(job)
    return TASKS[name].report_view if name in TASKS else ""


def task_label(job: Job) -> str:
    """The task as swept (``addition_lsb`` stays apart from ``addition``), else its name."""
    return str(job.params.get("data") or task_of(job))


def record_task(job: Job, record: dict[str, Any]) -> str:
    """The task a record scores: a mixture's part (``data=chomsky``: each part its own table),
    else the job's task as swept."""
    return str(record.get("task") or task_label(job))


def train_sizes(job: Job) -> tuple[int, int]:
    """The job's training size range."""
    lo, hi = job.config.data.params.get("train_lengths", (1, 1))
    return int(lo), int(hi)


Column = Callable[[Job], PEDisplay]


def column_key(ctx: ReportContext) -> Column:
    """What a table column is: the PE, and every other swept setting but the task and the seed
    (a sweep over ``pe.max_distance`` gets one column per value, not a mean over them). A
    single run's overrides are its settings, listed once above the tables, not a column name."""
    # The task's own settings (data.*) name its table already.
    # pe.max_position is the range randomized positions are drawn from: part of "randomized".
    skip = (
        "seed",
        "pe",
        "pe.randomized",
        "pe.max_position",
        *(k for k in ctx.swept if k.startswith("data")),
    )

    def key(job: Job) -> PEDisplay:
        pe = job_pe(job)
        rest = ctx.rest(job, exclude=skip)
        return replace(pe, label=f"{pe.label} ({rest})") if rest else pe

    return key


ACCURACY, TOKEN_ACCURACY = "accuracy", "token_accuracy"  # the record fields the view reads


def size_values(
    jobs: list[Job], key: Column = job_pe, field: str = ACCURACY
) -> dict[tuple[str, PEDisplay, int], list[float]]:
    """(task, PE, size) -> each seed's ``field`` (exact-match or per-token accuracy)."""
    sums: dict[tuple[str, PEDisplay, int], list[float]] = {}
    for job in jobs:
        for r in task_records(job):
            if r.get(field) is not None:
                sums.setdefault((record_task(job, r), key(job), r["length"]), []).append(r[field])
    return sums


def collect(
    sums: dict[tuple[str, PEDisplay, int], list[float]],
) -> dict[str, dict[PEDisplay, dict[int, float]]]:
    """task -> PE (randomized positions apart) -> size -> accuracy (mean over seeds), from
    ``size_values``."""
    out: dict[str, dict[PEDisplay, dict[int, float]]] = {}
    for task, pe, size in sorted(sums, key=lambda k: (k[0], k[1].sort_key, k[2])):
        values = sums[task, pe, size]
        out.setdefault(task, {}).setdefault(pe, {})[size] = sum(values) / len(values)
    return out


def unmeasured(jobs: list[Job], key: Column = job_pe) -> dict[str, dict[PEDisplay, dict[int, str]]]:
    """task -> PE -> size -> why it has no accuracy (an Abacus table shorter than the numbers)."""
    out: dict[str, dict[PEDisplay, dict[int, str]]] = {}
    for job in jobs:
        for r in task_records(job):
            if r.get("accuracy") is None and r.get("note"):
                by_size = out.setdefault(record_task(job, r), {}).setdefault(key(job), {})
                by_size[r["length"]] = str(r["note"])
    return out


def unmeasured_notes(missing: dict[PEDisplay, dict[int, str]]) -> list[str]:
    """One line per PE and reason: which sizes have no accuracy, and why."""
    lines = []
    for pe in ordered(missing):
        reasons: dict[str, list[int]] = {}
        for size, note in sorted(missing[pe].items()):
            reasons.setdefault(note, []).append(size)
        for note, sizes in reasons.items():
            shown = ", ".join(map(str, sizes))
            lines.append(f"- {pe.label}, size{'s' * (len(sizes) > 1)} {shown}: {note}.")
    return lines


def seeds_caption(counts: list[int]) -> str:
    """How many seeds a summary cell averages (``counts``: the sorted distinct numbers)."""
    if not counts or counts[-1] <= 1:
        return "one seed per PE (no spread: sweep `seed=0,1,2` for mean ± std)."
    shown = str(counts[0]) if counts[0] == counts[-1] else f"{counts[0]}–{counts[-1]}"
    return f"mean ± sample std over n = {shown} seeds."


def seed_summary(
    jobs: list[Job], top: int, key: Column = job_pe, field: str = ACCURACY
) -> dict[str, dict[PEDisplay, list[float]]]:
    """task -> PE -> each seed's (job's) mean ``field`` over the sizes past the training range."""
    out: dict[str, dict[PEDisplay, list[float]]] = {}
    for job in jobs:
        by_task: dict[str, list[float]] = {}
        for r in task_records(job):
            if r.get(field) is not None and r["length"] > top:
                by_task.setdefault(record_task(job, r), []).append(r[field])
        for task, values in by_task.items():
            per_pe = out.setdefault(task, {})
            per_pe.setdefault(key(job), []).append(sum(values) / len(values))
    return out


def spread_sentence(task: str, seeds: dict[PEDisplay, list[float]]) -> str:
    """Whether the best PE's lead over the second past the training sizes exceeds seed noise."""
    if len(seeds) < 2:
        return ""
    stats = sorted(((*mean_std(v), len(v), pe) for pe, v in seeds.items()), key=lambda x: -x[0])
    (m1, s1, n1, a), (m2, s2, n2, b) = stats[0], stats[1]
    if round(m1 - m2, 3) == 0:  # a tie as printed: no leader to name
        return (
            f"- **{task}**: {a.label} and {b.label} are level past the training sizes ({m1:.3f})."
        )
    verdict = rule(m1 - m2, [s1, s2], min(n1, n2))  # the one rule (posexp.results.verdict)
    if not verdict.decided:  # no leader named: the data do not support one
        return (
            f"- **{task}**: {a.label} and {b.label} past the training sizes, {m1:.3f} against "
            f"{m2:.3f}: {verdict.words()}."
        )
    return (
        f"- **{task}**: {a.label} leads {b.label} past the training sizes by {m1 - m2:.3f}: "
        f"{verdict.words()}."
    )


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
    """How often the PEs a finding ranks best (worst) lead (trail) here, ranked among the runs
    on consecutive positions (the papers ranked no randomized ones, so a randomized run leading
    a task must not count against their pick); '' if none was run or no task separates them."""
    summary = {t: {p: v for p, v in s.items() if not p.randomized} for t, s in summary.items()}
    spread = {
        t: s
        for t, s in summary.items()
        if t in spread and s and max(s.values()) - min(s.values()) >= 0.01
    }
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
    return (
        f"here {', and '.join(parts)} task(s) where the PEs on consecutive positions differ by "
        "at least 0.01"
    )


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


def randomized_verdicts(
    jobs: list[Job],
    top: int,
    key: Column = job_pe,
    skip: frozenset[str] = frozenset(),
    field: str = ACCURACY,
) -> list[str]:
    """Ruoss et al.'s claim on average over tasks: per PE run both ways, each seed's ``field``
    past the training sizes averaged over every task it was scored on (but the tasks in
    ``skip``, which no PE learned), randomized minus plain, seeds paired, with the verdict of
    the one rule ([] where no PE was run both ways)."""
    per_seed: dict[PEDisplay, dict[int, float]] = {}
    for job in jobs:
        values = [
            r[field]
            for r in task_records(job)
            if r.get(field) is not None and r["length"] > top and r.get("task") not in skip
        ]
        if values and job.config:
            per_seed.setdefault(key(job), {})[int(job.config.seed)] = sum(values) / len(values)
    out = []
    for plain in ordered(p for p in per_seed if not p.randomized):
        # The same column but for randomized positions (other swept settings in the label too).
        label = plain.label.replace(
            describe_pe(plain.name).label, describe_pe(plain.name, randomized=True).label, 1
        )
        randomized = next((p for p in per_seed if p.randomized and p.label == label), None)
        if randomized is None:
            continue
        seeds = sorted(per_seed[plain].keys() & per_seed[randomized].keys())
        if not seeds:
            continue
        a = [per_seed[randomized][s] for s in seeds]
        b = [per_seed[plain][s] for s in seeds]
        verdict = paired(a, b)
        scope = "every task" if not skip else "every task some PE learned"
        metric = "" if field == ACCURACY else ", per-token accuracy"
        out.append(
            f"- **{scope}** (Ruoss et al.'s average{metric}): {randomized.label} minus {plain.label} "
            f"past the training sizes, {verdict.gap:+.3f} ({sum(a) / len(a):.3f} against "
            f"{sum(b) / len(b):.3f}): {verdict.words()}."
        )
    return out


def frontier(table: dict[Any, dict[int, float]], level: float = 0.5) -> dict[Any, int | None]:
    """Per PE, the largest test size answered with at least ``level`` accuracy."""
    return {
        pe: max((n for n, a in by.items() if a >= level), default=None) for pe, by in table.items()
    }


def render(ctx: ReportContext) -> str:
    """The section's Markdown (and its CSV and figure)."""
    jobs = [j for j in ctx.jobs if task_records(j) and task_view(j) == VIEW]
    key = column_key(ctx)
    per_seed = size_values(jobs, key)
    data = collect(per_seed)
    missing = unmeasured(jobs, key)
    for task, by_pe in missing.items():  # a PE measured at no size still gets its column
        for pe in by_pe:
            data.setdefault(task, {}).setdefault(pe, {})
    top = train_sizes(jobs[0])
    examples = max((r.get("examples") or 0) for j in jobs for r in task_records(j))
    out = [
        "## Length generalization (exact-match accuracy)",
        "",
        f"Trained on sizes {top[0]}–{top[1]}; {examples} fixed test instances per size; greedy "
        f"answers scored by exact match; no extension method. Sizes marked * were trained on. "
        f"Cells: {seeds_caption(sorted({len(v) for v in per_seed.values()}) or [0])}",
        "",
    ]
    per_token = size_values(jobs, key, TOKEN_ACCURACY)
    rows_csv, summary = [], {}
    for task, table in data.items():
        pes = ordered(table)
        gaps = missing.get(task, {})
        sizes = sorted({n for by in [*table.values(), *gaps.values()] for n in by})
        rows = [
            [
                f"{n}{'*' if top[0] <= n <= top[1] else ''}",
                *(summary_cell(per_seed.get((task, p, n)), 2) for p in pes),
            ]
            for n in sizes
        ]
        out += [
            f"### {task}",
            "",
            md_table(["size", *(p.label for p in pes)], rows, ["l", *"r" * len(pes)]),
            "",
        ]
        if gaps:
            out += ["Not measured (—):", "", *unmeasured_notes(gaps), ""]
        rows_csv += [
            {
                "task": task,
                "pe": p.name,
                "randomized": p.randomized,
                "size": n,
                "accuracy": table[p].get(n),
                # A sample std needs two seeds: one seed has none (not 0).
                "accuracy_std": mean_std(per_seed[task, p, n])[1]
                if len(per_seed.get((task, p, n), [])) > 1
                else None,
                "n": len(per_seed.get((task, p, n), [])),
                "token_accuracy": mean_std(per_token[task, p, n])[0]
                if (task, p, n) in per_token
                else None,
                "token_accuracy_std": mean_std(per_token[task, p, n])[1]
                if len(per_token.get((task, p, n), [])) > 1
                else None,
            }
            for p in pes
            for n in sizes
        ]
        summary[task] = beyond_means(table, top[1])
    all_pes = ordered({p for table in data.values() for p in table})
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
        *token_summary(jobs, top[1], key, all_pes),
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
        *unlearned_sentences(data, top),
        # A task no PE learned at the trained sizes ranks nothing past them.
        *reading({t: v for t, v in summary.items() if t not in unlearned_tasks(data, top)}),
        *(
            f"- **{t}**: {names(blind)} could not be measured past the training sizes (see the "
            "note under its table)."
            for t, by_pe in missing.items()
            if (blind := [p for p in by_pe if p not in summary.get(t, {})])
        ),
        *filter(None, (spread_sentence(t, seeds.get(t, {})) for t in summary)),
        *randomized_verdicts(jobs, top[1], key, frozenset(unlearned_tasks(data, top))),
        # On the papers' own metric, over every task as they averaged it.
        *randomized_verdicts(jobs, top[1], key, field=TOKEN_ACCURACY),
        "",
    ]
    csv = ctx.write_csv(
        "report_length_generalization.csv",
        rows_csv,
        [
            "task",
            "pe",
            "randomized",
            "size",
            "accuracy",
            "accuracy_std",
            "n",
            "token_accuracy",
            "token_accuracy_std",
        ],
    )
    png = plot(ctx, data, top)
    out += [f"![accuracy against size]({png.name})", "", f"Data: `{csv.name}`."]
    return "\n".join(out)


def token_summary(jobs: list[Job], top: int, key: Column, pes: list[PEDisplay]) -> list[str]:
    """The table of per-token accuracy past the training sizes (task x PE, seeds' mean ± std),
    with its heading and caption; [] where no record has it (runs scored before it existed)."""
    seeds = seed_summary(jobs, top, key, TOKEN_ACCURACY)
    if not seeds:
        return []
    counts = sorted({len(v) for by_pe in seeds.values() for v in by_pe.values()})
    return [
        "### Per-token accuracy past the training sizes",
        "",
        "The share of answer tokens whose teacher-forced argmax is right (eos left out), the "
        "metric of Delétang et al. (2023) and Ruoss et al. (2023): it credits an answer that is "
        "right in most places, where exact match gives it nothing. Each seed's mean over the "
        "sizes past training, then " + seeds_caption(counts),
        "",
        md_table(
            ["task", *(p.label for p in pes)],
            [[t, *(summary_cell(by_pe.get(p)) for p in pes)] for t, by_pe in seeds.items()],
            ["l", *"r" * len(pes)],
        ),
        "",
    ]


LEARNED = 0.5  # a task some PE answers this often at the trained sizes was learned


def learned_bar(task: str) -> float:
    """The accuracy at the trained sizes that counts ``task`` as learned: ``LEARNED``, or
    halfway from its chance (a task's declared guessing accuracy) to 1, whichever is higher."""
    from posexp.data.synthetic import TASKS

    chance = TASKS[task].chance if task in TASKS else 0.0
    return max(LEARNED, (1 + chance) / 2)


def best_trained(table: dict[Any, dict[int, float]], top: tuple[int, int]) -> float | None:
    """The best accuracy any PE reaches at a trained size, None when none was measured."""
    trained = [v for by in table.values() for n, v in by.items() if top[0] <= n <= top[1]]
    return max(trained) if trained else None


def unlearned_tasks(data: dict[str, dict[Any, dict[int, float]]], top: tuple[int, int]) -> set[str]:
    """The tasks no PE learned even at the trained sizes (``learned_bar``)."""
    return {
        task
        for task, table in data.items()
        if (best := best_trained(table, top)) is not None and best < learned_bar(task)
    }


def unlearned_sentences(
    data: dict[str, dict[Any, dict[int, float]]], top: tuple[int, int]
) -> list[str]:
    """A warning per task that no PE learned even at the trained sizes: its tables then say
    nothing about length generalization."""
    out = []
    for task in [t for t in data if t in unlearned_tasks(data, top)]:
        best, bar = best_trained(data[task], top), learned_bar(task)
        out.append(
            f"- **{task}**: no PE learned the task: the best accuracy at the trained sizes "
            f"is {best:.2f} (below {bar:g}"
            + (f", halfway from chance {2 * bar - 1:g} to 1" if bar > LEARNED else "")
            + "), so its tables say nothing about length generalization; train longer."
        )
    return out


def summary_cell(values: list[float] | None, places: int = 3) -> str:
    """Mean ± std of the seeds' values to ``places`` (the mean alone for one seed)."""
    if not values:
        return "—"
    return mean_std_text(*mean_std(values), len(values), places)


register_report_view(
    VIEW,
    lambda jobs: any(task_records(j) and task_view(j) == VIEW for j in jobs),
    render,
    order=12,
)
