"""The report's passkey view: retrieval accuracy by context length, method and key depth.

For a folder holding a passkey run (``experiment=passkey``) and its fine-tunes (scripts/passkey.py):
a table with one row per method, zero-shot on the passkey run and after each fine-tune (its
baked-in method), and one column per length as a multiple of L0; cells are accuracy averaged
over the key depths every cell was scored at (``common_depths``; the caption names them and the
cells with more), then mean ± sample std over the seeds (scripts/passkey.py --seeds). Sentences say
on how many seeds retrieval was learned and whether each fine-tune's gain over the plain
fine-tune exceeds seed noise. A figure holds one depth × length heat map per row (seed mean).

Where the runs trained from scratch differ in more than their seed (a sweep over encodings,
``experiment=fourth_wave_passkey``), each zero-shot row is named by its model too
(``rope · yarn (zero-shot)``), each method is set against no method of its own model, the
models without a method are ranked at every length past L0, and the figure keeps to those rows
(the table has every method).
"""

from __future__ import annotations

from typing import Any

from posexp.commands.report.depth_maps import depth_maps
from posexp.commands.report.jobs import Job
from posexp.commands.report.stats import mean_std, mean_std_text
from posexp.commands.report.view import ReportContext, md_table, register_report_view
from posexp.commands.report.views.tasks import task_view
from posexp.extension import baseline_method
from posexp.results.depths import (
    MARK,
    DepthMeans,
    averaged_text,
    common_depths,
    depths_note,
    depths_phrase,
)
from posexp.results.labels import run_labels
from posexp.results.verdict import MIN_SEEDS, compare, paired

VIEW = "passkey"  # the view a task names as its report_view (posexp/data/synthetic)
Cell = dict[tuple[float, int], dict[int, float]]  # (depth, size) -> seed -> accuracy
Depths = DepthMeans[tuple[str, int, int]]  # per (row, size, seed)
# Zero-shot accuracy at L0 from which a seed counts as having learned retrieval (chance: 1e-5).
LEARNED = 0.5
ZERO_SHOT_BASELINE = f"{baseline_method()} (zero-shot)"
BASELINE = f"{baseline_method()} + fine-tune"


def passkey_jobs(jobs: list[Job]) -> list[Job]:
    """Jobs of the passkey task with accuracy records."""
    return [
        j
        for j in jobs
        if j.extrapolate
        and task_view(j) == VIEW
        and any(r.get("metric") == "accuracy" for r in j.extrapolate)
    ]


def is_finetune(job: Job) -> bool:
    """True for a `posexp finetune` run (it records the parent's training length)."""
    return bool(job.config and job.config.parent and job.config.train_length)


def seed_of(job: Job) -> int:
    """The job's seed (0 when its config is unreadable)."""
    return int(job.config.seed) if job.config else 0


SEP = " · "  # between a model and its method in a row's label


def model_names(jobs: list[Job]) -> dict[int, str]:
    """Each run trained from scratch -> its model's name (the settings that tell the runs
    apart, seed aside), by ``id``; empty where they differ in their seed only."""
    plain = [j for j in jobs if not is_finetune(j)]
    names = run_labels([j.settings for j in plain], exclude=("seed",)) if plain else []
    return {id(j): n for j, n in zip(plain, names, strict=True)} if len(set(names)) > 1 else {}


def row_label(model: str, label: str) -> str:
    """A row's label: ``label`` alone, or after its ``model`` where runs differ in their model."""
    return f"{model}{SEP}{label}" if model else label


def model_of(label: str) -> str:
    """The model part of a row's label ('' where rows are not named by model)."""
    return label.rpartition(SEP)[0]


def rows_of(
    jobs: list[Job],
    unscored: list[str] | None = None,
    models: dict[int, str] | None = None,
    field: str = "accuracy",
) -> dict[str, Cell]:
    """Row label -> accuracies per seed (``field``: exact match, or ``token_accuracy``, the
    share of the key's digits right): zero-shot methods of un-fine-tuned runs (after their
    model's name where ``models`` names them), baked methods of fine-tunes, and ``none`` for a
    fine-tune without a method (the baseline). A fine-tune with a method but no record of it is
    named in ``unscored`` and left out: its records without the method are not the baseline's."""
    out: dict[str, Cell] = {}
    models = models or {}
    for job in sorted(jobs, key=lambda j: (is_finetune(j), j.name)):  # zero-shot rows first
        tuned = is_finetune(job)
        # A fine-tune is reported with the method it was trained with (its config's): baked in,
        # or none when it has none.
        baked = tuned and job.config.extension.method != baseline_method()
        trained_with = next(
            (r["method"] for r in job.extrapolate if r.get("baked")),
            None if baked else baseline_method(),
        )
        if tuned and trained_with is None:
            if unscored is not None:
                unscored.append(job.name)
            continue
        how = " + PoSE fine-tune" if tuned and job.config.train.pose.enabled else " + fine-tune"
        for r in job.extrapolate:
            if r.get(field) is None or r.get("depth") is None:
                continue
            method = r["method"]
            if tuned and method != trained_with:
                continue
            label = (
                f"{tuned_name(job, method)}{how}"
                if tuned
                else row_label(models.get(id(job), ""), f"{method} (zero-shot)")
            )
            cell = out.setdefault(label, {}).setdefault((float(r["depth"]), int(r["length"])), {})
            cell[seed_of(job)] = float(r[field])
    return out


def tuned_name(job: Job, method: str) -> str:
    """A fine-tune's method (``baked:yarn`` -> ``yarn``) with the settings it changed from the
    method's defaults, so an ablation of one setting gets its own row: ``yarn(beta_fast=8)``."""
    from posexp.extension.spec import spec_of

    name, ext = method.split(":")[-1].split("(")[0], job.config.extension
    if ext.method != name:
        return name
    return spec_of(name, ext.params).label


def seed_means(rows: dict[str, Cell]) -> tuple[dict[tuple[str, int], dict[int, float]], Depths]:
    """(row, size) -> seed -> accuracy averaged over the key depths every cell of the table was
    scored at (``common_depths``: a method scored at one more depth keeps to the others), and
    those depths with the cells that had more or lack some."""
    units: dict[tuple[str, int, int], dict[float | None, float]] = {}
    for label, cell in rows.items():
        for (d, n), seeds in cell.items():
            for seed, v in seeds.items():
                units.setdefault((label, n, seed), {})[d] = v
    depths = common_depths(units)
    out: dict[tuple[str, int], dict[int, float]] = {}
    for label, n, seed in sorted(depths.means, key=lambda k: k[2]):
        out.setdefault((label, n), {})[seed] = depths.means[label, n, seed]
    return out, depths


def marked(depths: Depths, label: str, size: int) -> bool:
    """True where a seed of the cell (``label``, ``size``) averages its own depths (``MARK``)."""
    return any(k[:2] == (label, size) for k in depths.own)


def learned_sentence(rows: dict[str, Cell], l0_size: int) -> str:
    """On how many seeds the passkey run retrieves keys at L0 zero-shot (the table's depths);
    where the rows are named by model, one sentence for all: the models that learned on every
    seed together, each other model with its seeds."""
    means = seed_means(rows)[0]
    found = {
        model_of(label): accs
        for label in rows
        if label.endswith(ZERO_SHOT_BASELINE) and (accs := means.get((label, l0_size)))
    }
    if not found:
        return ""

    def seeds(accs: dict[int, float]) -> str:
        k = sum(v >= LEARNED for v in accs.values())
        values = ", ".join(f"seed {s}: {v:.2f}" for s, v in accs.items())
        return f"on {k} of {len(accs)} seed{'s' if len(accs) != 1 else ''} ({values})"

    said = f"- Retrieval was learned (zero-shot accuracy at L0 ≥ {LEARNED})"
    if "" in found:
        return f"{said} {seeds(found[''])}."
    every = [m for m, accs in found.items() if all(v >= LEARNED for v in accs.values())]
    parts = []
    if every:
        n = sorted({len(found[m]) for m in every})
        counts = "/".join(map(str, n))
        parts.append(f"on every seed (n = {counts}) by {', '.join(every)}")
    parts += [f"by {m} {seeds(accs)}" for m, accs in found.items() if m not in every]
    return f"{said} {'; '.join(parts)}."


def model_gain_sentences(rows: dict[str, Cell], size: int, length_text: str) -> list[str]:
    """Per model, one sentence on each of its methods against no method at ``size``, seeds
    paired: which are better or worse beyond seed noise (with their means), which level, and
    where neither retrieves a key; the rows are named by model."""
    means, depths = seed_means(rows)
    out = []
    for model in dict.fromkeys(model_of(label) for label in rows if model_of(label)):
        base_label = row_label(model, ZERO_SHOT_BASELINE)
        base = means.get((base_label, size), {})
        groups: dict[str, list[str]] = {}
        counts = set()
        for label in rows:
            if model_of(label) != model or label == base_label or not base:
                continue
            mine = means.get((label, size), {})
            seeds = sorted(set(mine) & set(base))
            if not seeds:
                continue
            method = label[len(model) + len(SEP) :].removesuffix(" (zero-shot)")
            if marked(depths, label, size) or marked(depths, base_label, size):
                groups.setdefault(f"not compared ({MARK}: other key depths)", []).append(method)
                continue
            if all(mine[s] == 0 == base[s] for s in seeds):
                groups.setdefault("neither retrieves a key", []).append(method)
                continue
            a, b = [mine[s] for s in seeds], [base[s] for s in seeds]
            verdict = paired(a, b)
            counts.add(verdict.n)
            if verdict.n < MIN_SEEDS:
                key = f"n = {verdict.n}: no verdict (it needs {MIN_SEEDS} seeds)"
                groups.setdefault(key, []).append(method)
            elif not verdict.decided:
                groups.setdefault("level (within seed noise)", []).append(method)
            else:
                side = "better" if verdict.gap > 0 else "worse"
                ma, mb = mean_std(a)[0], mean_std(b)[0]
                groups.setdefault(f"{side} beyond seed noise", []).append(
                    f"{method} ({ma:.2f} against {mb:.2f}, {verdict.ratio:.1f}×)"
                )
        if groups:
            decided = counts and min(counts) >= MIN_SEEDS  # else each group says its n
            n = f", n = {'/'.join(map(str, sorted(counts)))}" if decided else ""
            said = "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items())
            out.append(f"- {model}, each method against no method at {length_text}{n}: {said}.")
    return out


def gain_sentences(rows: dict[str, Cell], size: int, length_text: str) -> list[str]:
    """Each method against no method at ``size``, paired by seed: zero-shot rows against
    ``none (zero-shot)``, fine-tunes against the plain fine-tune, and a fine-tune with a setting
    changed (``yarn(beta_fast=8)``) also against its method's default fine-tune."""
    pairs = [  # rows named by model: model_gain_sentences
        (label, ZERO_SHOT_BASELINE)
        for label in rows
        if label.endswith("(zero-shot)") and label != ZERO_SHOT_BASELINE and not model_of(label)
    ]
    pairs += [
        (label, BASELINE) for label in rows if label.endswith("+ fine-tune") and label != BASELINE
    ]
    pairs += [
        (label, default)
        for label in rows
        if label.endswith(") + fine-tune")
        and (default := f"{label.split('(')[0]} + fine-tune") in rows
    ]
    out = []
    means, depths = seed_means(rows)
    for label, base_label in pairs:
        base, mine = means.get((base_label, size), {}), means.get((label, size), {})
        seeds = sorted(set(mine) & set(base))
        if not seeds:
            continue
        if marked(depths, label, size) or marked(depths, base_label, size):
            out.append(
                f"- At {length_text}, {label} and {base_label} are not compared: {MARK} their "
                "cells average different key depths."
            )
            continue
        if all(mine[s] == 0 == base[s] for s in seeds):  # a gap of +0.00 would read as a tie
            out.append(
                f"- At {length_text}, neither {label} nor {base_label} retrieves any key "
                f"(accuracy 0 at {depths_phrase(depths.depths, 'key depth')}, n = {len(seeds)} "
                f"seed{'s' * (len(seeds) != 1)}): nothing to compare."
            )
            continue
        sentence = compare(
            label,
            [mine[s] for s in seeds],
            base_label,
            [base[s] for s in seeds],
            what="accuracy",
            lower_is_better=False,
            where=f"at {length_text}",
        )
        out.append(f"- {sentence}")
    return out


def model_sentences(rows: dict[str, Cell], size: int, length_text: str) -> list[str]:
    """The models without a method at ``size``, best against second best (mean accuracy), seeds
    paired; none where the rows are not named by model or no model retrieves a key there."""
    means, depths = seed_means(rows)
    scored = [
        (label, means[label, size])
        for label in rows
        if model_of(label) and label.endswith(ZERO_SHOT_BASELINE) and (label, size) in means
    ]
    if len(scored) < 2:
        return []
    scored.sort(key=lambda x: -sum(x[1].values()) / len(x[1]))
    (best, a), (second, b) = scored[:2]
    if all(v == 0 for _, seeds in scored for v in seeds.values()):
        return [f"- At {length_text}, no model retrieves any key without a method."]
    if marked(depths, best, size) or marked(depths, second, size):
        return [
            f"- At {length_text}, {best} and {second} are not compared: {MARK} their cells "
            "average different key depths."
        ]
    seeds = sorted(set(a) & set(b))
    sentence = compare(
        model_of(best),
        [a[s] for s in seeds],
        model_of(second),
        [b[s] for s in seeds],
        what="accuracy",
        lower_is_better=False,
        where=f"at {length_text}, the best two models without a method,",
    )
    return [f"- {sentence}"]


def seeds_text(counts: dict[tuple[str, int], int]) -> str:
    """The caption's seed count over the cells scored on at least one seed (``counts``: (row,
    size) -> seeds): ``n = 3 seeds``, ``n = 1–3 seeds`` where cells differ, ``no seed``."""
    scored = sorted(set(counts.values()) - {0})
    if not scored:
        return "no seed"
    span = str(scored[0]) if len(scored) == 1 else f"{scored[0]}–{scored[-1]}"
    return f"n = {span} seed{'s' * (scored[-1] != 1)}"


def unscored_text(counts: dict[tuple[str, int], int], row_tokens: dict[int, int]) -> str:
    """Which rows have lengths no seed was scored at (the table's –), or "" where none has."""
    missing: dict[str, list[str]] = {}
    for (label, size), n in counts.items():
        if n == 0:
            missing.setdefault(label, []).append(f"{row_tokens[size]:,}")
    if not missing:
        return ""
    rows = "; ".join(f"{label} at {', '.join(lengths)}" for label, lengths in missing.items())
    return f" – where no seed was scored: {rows} tokens."


def heat_maps(
    ctx: ReportContext, rows: dict[str, Cell], row_tokens: dict[int, int], l0: int, seeds: str
) -> Any:
    """One depth × length accuracy heat map per table row, values written in the cells."""
    title = f"Passkey retrieval accuracy by key depth and context length (mean over {seeds})"
    labels = ("key depth", "retrieval accuracy", title)
    return depth_maps(ctx, rows, row_tokens, l0, labels, "report_passkey.png")


def render(ctx: ReportContext) -> str:
    """The section's Markdown (and its CSV and heat maps)."""
    from posexp.data.synthetic import make_data

    jobs = passkey_jobs(ctx.jobs)
    unscored: list[str] = []
    rows = rows_of(jobs, unscored, model_names(jobs))
    digits = rows_of(jobs, None, model_names(jobs), field="token_accuracy")
    untuned = [j for j in jobs if not is_finetune(j)]
    task = make_data(**(untuned or jobs)[0].config.data.params)
    l0 = task.longest_train_row()
    sizes = sorted({s for cell in rows.values() for _, s in cell})
    row_tokens = {s: task.task.row_tokens(s) for s in sizes}
    table = []
    csv = []
    counts: dict[tuple[str, int], int] = {}  # (row, size) -> seeds scored
    means, depths = seed_means(rows)
    for label, cell in rows.items():
        cells = []
        for s in sizes:
            accs = list(means.get((label, s), {}).values())
            counts[label, s] = len(accs)
            mark = MARK if marked(depths, label, s) else ""
            cells.append(mean_std_text(*mean_std(accs), len(accs), 2) + mark)
            csv += [
                {
                    "row": label,
                    "length": row_tokens[s],
                    "depth": d,
                    "seed": seed,
                    "accuracy": v,
                    "token_accuracy": digits.get(label, {}).get((d, n), {}).get(seed),
                }
                for (d, n), seeds in sorted(cell.items())
                if n == s
                for seed, v in sorted(seeds.items())
            ]
        table.append([label, *cells])
    header = [
        "model · method" if any(map(model_of, rows)) else "method",
        *(f"{row_tokens[s]:,} ({row_tokens[s] / l0:.3g}×)" for s in sizes),
    ]
    fields = ["row", "length", "depth", "seed", "accuracy", "token_accuracy"]
    path = ctx.write_csv("report_passkey.csv", csv, fields)
    n_text = seeds_text(counts)
    l0_size = min(sizes, key=lambda s: abs(row_tokens[s] - l0)) if sizes else 0
    tuned_sizes = [s for s in sizes if row_tokens[s] > l0]
    reading = [learned_sentence(rows, l0_size)]
    if tuned_sizes:
        s2 = tuned_sizes[0]
        reading += gain_sentences(
            rows, s2, f"{row_tokens[s2]:,} tokens ({row_tokens[s2] / l0:.3g}× L0)"
        )
        reading += model_gain_sentences(
            rows, s2, f"{row_tokens[s2]:,} tokens ({row_tokens[s2] / l0:.3g}× L0)"
        )
    for s in tuned_sizes:
        reading += model_sentences(
            rows, s, f"{row_tokens[s]:,} tokens ({row_tokens[s] / l0:.3g}× L0)"
        )
    # Several models: one map each without a method (the table has the methods).
    drawn = {k: v for k, v in rows.items() if k.endswith(ZERO_SHOT_BASELINE) and model_of(k)}
    drawn_n = seeds_text({k: n for k, n in counts.items() if k[0] in drawn}) if drawn else n_text
    png = heat_maps(ctx, drawn or rows, row_tokens, l0, drawn_n)
    note = depths_note(depths, lambda k: (k[0], f"{row_tokens[k[1]]:,}"), " tokens", "key depth")
    note = f" {note}" if note else ""
    return "\n".join(
        [
            "## Passkey retrieval",
            "",
            f"Accuracy of the 5-digit key, averaged over {averaged_text(depths, 'key depth')}; "
            f"rows of L0 = {l0} "
            f"tokens during training; zero-shot rows apply the method at evaluation only, "
            f"fine-tune rows continued training with it baked in, on longer rows (PoSE fine-tune: "
            f"on rows of L0 whose positions span the longer length) (none + fine-tune: the same "
            f"fine-tune without a method). Mean ± sample std over {n_text}."
            + unscored_text(counts, row_tokens)
            + note,
            "",
            md_table(header, table, ["l", *"r" * len(sizes)]),
            "",
            *(
                [
                    f"Not in the table: {', '.join(unscored)}, fine-tuned with a method but not "
                    "scored with it (`posexp eval-extrapolate --run <run> --method baked`).",
                    "",
                ]
                if unscored
                else []
            ),
            *(["Reading the table:", "", *filter(None, reading), ""] if any(reading) else []),
            *digit_table(digits, sizes, row_tokens, header),
            f"![passkey heat maps]({png.name})",
            "",
            f"Data: `{path.name}`.",
        ]
    )


def digit_table(
    digits: dict[str, Cell], sizes: list[int], row_tokens: dict[int, int], header: list[str]
) -> list[str]:
    """The share of the key's digits right (per-token accuracy), laid out as the accuracy
    table: it tells a key found in part (a route that is imprecise at every length) from one
    not found at all (chance 0.1), where exact match gives both 0. [] where no record has it."""
    if not digits:
        return []
    means, _ = seed_means(digits)
    table = [
        [
            label,
            *(
                mean_std_text(*mean_std(list(v.values())), len(v), 2)
                if (v := means.get((label, s)))
                else "—"
                for s in sizes
            ),
        ]
        for label in digits
    ]
    return [
        "Digits right (per-token accuracy: the share of the key's 5 digits predicted right, "
        "teacher-forced; chance 0.1), averaged over the same key depths:",
        "",
        md_table(header, table, ["l", *"r" * len(sizes)]),
        "",
    ]


register_report_view(VIEW, lambda jobs: bool(passkey_jobs(jobs)), render, order=13)
