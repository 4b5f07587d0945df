"""The report's "Where attention goes" section: what ``posexp attention`` measured in each job
(``<run>/attention/summary.csv``), averaged over seeds, one colour per PE.

Two numbers per job and layer, each the mean over heads: the attention mass at distances of at
least the training length L0 (over the queries at positions >= L0, at the job's longest
measured length), and the first token's share over the second half of the window (at L0 and
at the longest length). The sentences compare each row with RoPE's (else the first row's) under
the verdict rule (``posexp.results.verdict``), on the mean over layers, seeds paired in order.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posexp.commands.report.jobs import Job
from posexp.commands.report.stats import decimals_for, mean_std_text
from posexp.commands.report.view import ReportContext, md_table, register_report_view
from posexp.errors import PosexpError
from posexp.results.verdict import MIN_SEEDS, mean_std, paired

VIEW = "attention"
SUMMARY = Path("attention") / "summary.csv"
REFERENCE_FAMILY = "rotary"  # the rows are compared with the first rotary encoding's


@dataclass
class JobAttention:
    """One job's per-layer numbers (means over heads) read from its summary."""

    pe: str
    seed: str
    train_length: int
    longest: int
    far: dict[int, float] = field(default_factory=dict)  # at the longest length
    sink_l0: dict[int, float] = field(default_factory=dict)
    sink_longest: dict[int, float] = field(default_factory=dict)


def read_summary(job: Job) -> JobAttention | None:
    """The job's ``attention/summary.csv`` as per-layer head means; None when absent or not
    readable as the command writes it."""
    path = job.path / SUMMARY
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        meta = job.meta or {}
        train_length = int(meta["model"]["train_length"])
        pe = str(meta["model"]["pe"])
        lengths = sorted({int(r["length"]) for r in rows})
        by: dict[tuple[str, int, int], list[float]] = defaultdict(list)
        for r in rows:
            n, layer = int(r["length"]), int(r["layer"])
            if r["far_mass"] != "":
                by["far", n, layer].append(float(r["far_mass"]))
            by["sink", n, layer].append(float(r["late_sink_share"]))
    except (OSError, KeyError, ValueError, TypeError, PosexpError):
        return None
    if not lengths:
        return None
    longest = lengths[-1]
    out = JobAttention(pe, job.setting("seed"), train_length, longest)

    def head_mean(kind: str, n: int) -> dict[int, float]:
        return {layer: sum(v) / len(v) for (k, m, layer), v in by.items() if k == kind and m == n}

    out.far = head_mean("far", longest)
    out.sink_l0 = head_mean("sink", train_length)
    out.sink_longest = head_mean("sink", longest)
    return out


def attention_jobs(jobs: list[Job]) -> list[Job]:
    """The jobs ``posexp attention`` has measured."""
    return [j for j in jobs if (j.path / SUMMARY).is_file()]


def overall(values: dict[int, float]) -> float | None:
    """The mean over layers, None without any."""
    return sum(values.values()) / len(values) if values else None


def sentence(what: str, label: str, values: list[float], ref: str, ref_values: list[float]) -> str:
    """One comparison of ``what`` under the verdict rule (seeds paired in order)."""
    verdict = paired(values, ref_values)
    a, b = mean_std(values)[0], mean_std(ref_values)[0]
    numbers = f"{a:.3g} against {b:.3g}"
    if verdict.n < MIN_SEEDS:
        return f"{label} against {ref} ({what}; {numbers}): {verdict.words()}."
    if not verdict.decided:
        return f"{label} and {ref} are level on {what} ({numbers}: {verdict.words()})."
    more = "more" if verdict.gap > 0 else "less"
    return f"{label} has {more} {what} than {ref} ({numbers}: {verdict.words()})."


def share_text(m: float, s: float, n: int) -> str:
    """``m ± s`` to 3 significant digits; a share below 0.001 in powers of ten (1.4e-14), where
    fixed decimals would run to fifteen places."""
    import math

    if n == 0 or math.isnan(m):
        return "–"
    if abs(m) >= 1e-3 or m == 0:
        return mean_std_text(m, s, n, decimals_for(m, 3))
    return f"{m:.2e}" if n == 1 else f"{m:.2e} ± {s:.1e}"


def render(ctx: ReportContext) -> str:
    """The section's Markdown, its CSV and its figure."""
    from posexp.results.attention import plot_layers_by_pe

    measured = [(j, read_summary(j)) for j in attention_jobs(ctx.jobs)]
    unreadable = [j.name for j, a in measured if a is None]
    from posexp.commands.report.views.findings import job_pe
    from posexp.pe.base import describe_pe
    from posexp.results.style import display_style

    groups: dict[str, list[JobAttention]] = defaultdict(list)
    order: dict[str, tuple] = {}
    styles: dict[str, Any] = {}  # a row's style (a layered preset's own, not layered's)
    for job, a in measured:
        if a is not None:
            # The PE as every other view shows it ("ALiBi"), then the other varying settings.
            pe = job_pe(job) if job.config else None
            rest = ctx.rest(job, ("seed", "pe"))
            label = (pe.label if pe else ctx.label(job, exclude=("seed", "pe"))) + (
                f" · {rest}" if rest else ""
            )
            groups[label].append(a)
            order[label] = (pe.sort_key if pe else (10**6, "", False), rest)
            styles[label] = display_style(pe) if pe else a.pe
    groups = defaultdict(list, sorted(groups.items(), key=lambda kv: order[kv[0]]))
    if not groups:
        return "## Where attention goes\n\nNo job's `attention/summary.csv` could be read."
    for members in groups.values():  # seed order: the pairs of the verdict rule
        members.sort(key=lambda a: (0, int(a.seed), "") if a.seed.isdigit() else (1, 0, a.seed))
    csv_rows = [
        {
            "row": label,
            "pe": a.pe,
            "seed": a.seed,
            "layer": layer,
            "train_length": a.train_length,
            "longest": a.longest,
            "far_mass": a.far.get(layer),
            "sink_share_l0": a.sink_l0.get(layer),
            "sink_share_longest": a.sink_longest.get(layer),
        }
        for label, members in groups.items()
        for a in members
        for layer in sorted(a.sink_l0 | a.sink_longest)
    ]
    data = ctx.write_csv("report_attention.csv", csv_rows)

    def series(attr: str) -> dict[str, tuple[str, dict[int, list[float]]]]:
        out = {}
        for label, members in groups.items():
            by_layer: dict[int, list[float]] = defaultdict(list)
            for a in members:
                for layer, v in getattr(a, attr).items():
                    by_layer[layer].append(v)
            if by_layer:
                out[label] = (styles[label], dict(by_layer))
        return out

    longest = sorted({a.longest for m in groups.values() for a in m})
    at = f"{longest[0]:,} tokens" if len(longest) == 1 else "each job's longest measured length"
    panels = [
        (f"mass at distance ≥ L0, at {at}", "attention mass (queries past L0)", series("far")),
        ("first-token share at L0", "share of attention on token 0", series("sink_l0")),
        (f"first-token share at {at}", "share of attention on token 0", series("sink_longest")),
    ]
    log_y = [p[0].startswith("first-token") for p in panels if p[2]]
    panels = [p for p in panels if p[2]]
    fig = plot_layers_by_pe(
        panels, "Where attention goes: mean over heads, band over seeds", log_y=log_y
    )
    png = ctx.save_figure(fig, "report_attention.png")

    table = []
    for label, members in groups.items():
        cells = [label, len(members)]
        for attr in ("far", "sink_l0", "sink_longest"):
            values = [v for a in members if (v := overall(getattr(a, attr))) is not None]
            m, s = mean_std(values)
            cells.append(share_text(m, s, len(values)))
        table.append(cells)
    reference = next(
        (label for label, m in groups.items() if describe_pe(m[0].pe).family == REFERENCE_FAMILY),
        next(iter(groups)),
    )
    reading = []
    for what, attr in (
        ("attention mass beyond L0", "far"),
        ("first-token share at the longest length", "sink_longest"),
    ):
        ref_values = [v for a in groups[reference] if (v := overall(getattr(a, attr))) is not None]
        if not ref_values:
            continue
        for label, members in groups.items():
            values = [v for a in members if (v := overall(getattr(a, attr))) is not None]
            if label != reference and values:
                reading.append("- " + sentence(what, label, values, reference, ref_values))
    header = ["row", "jobs", "mass ≥ L0 (longest)", "token-0 share (L0)", "token-0 share (longest)"]
    lines = [
        "## Where attention goes",
        "",
        "From `posexp attention` in each job: the attention mass at distances of at least the "
        "training length L0 (averaged over the queries at positions ≥ L0), and the share of "
        "attention on the window's first token (averaged over the window's second half), each "
        "the mean over heads and layers; mean ± sample std over seeds.",
        "",
        md_table(header, table, ["l", "r", "r", "r", "r"]),
        "",
    ]
    if reading:
        lines += [f"Against {reference} (means over layers, seeds paired):", "", *reading, ""]
    if len(longest) > 1:
        lines += [
            f"The jobs' longest measured lengths differ ({', '.join(f'{n:,}' for n in longest)} "
            f"tokens): the mass beyond L0 and the share at the longest length mix lengths; "
            f"`posexp attention --run <sweep> --len N` measures every job at one.",
            "",
        ]
    if unreadable:
        lines += [f"Not read (a damaged summary): {', '.join(unreadable)}.", ""]
    lines += [f"![where attention goes]({png.name})", "", f"Data: `{data.name}`."]
    return "\n".join(lines)


register_report_view(VIEW, lambda jobs: bool(attention_jobs(jobs)), render, order=15)
