"""The report's extrapolation view: test perplexity against length, per PE and method.

Rows = evaluation length, columns = PE (and PE+method), from each job's
``eval/extrapolate.json``, next to the ALiBi paper's published numbers (Press et al. 2022,
``configs/findings.yaml``).
"""

from __future__ import annotations

import math
from typing import Any

from posexp.commands.report.jobs import Job, natural_order, swept_value
from posexp.commands.report.stats import (
    mean_std,
    mean_std_text,
)
from posexp.commands.report.view import ReportContext, md_table, register_report_view
from posexp.commands.report.views.extrapolation_data import (
    Column,
    fine_tune_length,
    seed_records,
    series_fields,
    series_of,
    series_text,
)
from posexp.commands.report.views.extrapolation_paper import (
    published_section,
    seed_ratios,
)
from posexp.commands.report.views.extrapolation_plot import (
    extrapolation_plot,
    gap_notes,
    unplotted,
)
from posexp.commands.report.views.extrapolation_reading import (
    reading_sentences,
)
from posexp.commands.report.views.findings import job_pe
from posexp.extension import baseline_method
from posexp.scoring import SCORERS, TEXT, scorer_names


def extrapolation_columns(ctx: ReportContext) -> list[Column]:
    """Columns in the PEs' declared order (posexp/pe), each PE's methods in registry order; the
    jobs of one PE that differ only in ``seed`` share a column."""
    jobs = sorted(
        perplexity_jobs(ctx.jobs),
        key=lambda j: (
            job_pe(j).sort_key,
            tuple(natural_order(swept_value(j, k)) for k in ctx.swept),
        ),
    )
    tuned = ctx.lineage()  # a fine-tune: named by what it changed from its parent
    groups: dict[tuple[Any, str], list[Job]] = {}
    for job in jobs:
        rest = tuned.get(str(getattr(job, "path", ""))) or ctx.rest(job, exclude=("pe", "seed"))
        groups.setdefault((job_pe(job), rest), []).append(job)
    pes = [pe for pe, _ in groups]
    columns = []
    for (pe, extra), seeds in groups.items():
        base, key = pe.label, pe.name + (" randomized" if pe.randomized else "")
        # several columns per PE: name them by the rest; a fine-tune always by its change
        if extra and (pes.count(pe) > 1 or str(getattr(seeds[0], "path", "")) in tuned):
            base, key = f"{base} [{extra}]", f"{key} [{extra}]"
        # Records of one cell that differ in sample size, stride or precision are different
        # measurements: each is its own series (column), as in eval-extrapolate's tables.
        fields = series_fields(seeds)
        methods = list(dict.fromkeys(r["method"] for job in seeds for r in job.extrapolate))
        # a hand-made record without its sort key sorts last, by its label
        order = {
            r["method"]: r.get("order", (math.inf, r["method"]))
            for job in seeds
            for r in job.extrapolate
        }
        methods.sort(key=order.__getitem__)
        for method in methods:
            suffix = "" if method == baseline_method() else f"+{method}"
            found = [
                series_of(r, fields)
                for job in seeds
                for r in job.extrapolate
                if r["method"] == method
            ]
            for series in sorted(set(found), key=lambda s: tuple(natural_order(v) for v in s)):
                text = series_text(series, fields)
                tag = f" [{text}]" if text else ""
                recs = seed_records(seeds, method, dict(zip(fields, series, strict=True)))
                if recs:
                    name, csv_key = base + suffix + tag, key + suffix + tag
                    column = Column(name, seeds[0], method, recs, csv_key, pe, seeds, series=text)
                    column.l0, column.tuned_at = seeds[0].train_length, fine_tune_length(seeds[0])
                    columns.append(column)
    return columns


def _cell(record: dict[str, Any] | None, notes: list[str]) -> str:
    if record is None:
        return ""
    if record.get("ppl") is None:
        note = record.get("note") or "not evaluated"
        if note not in notes:
            notes.append(note)
        return f"n/a [{notes.index(note) + 1}]"
    mean = float(record["ppl"])
    # Perplexities to 2 decimals in every cell: a column reads 5.74 beside 20.95.
    return mean_std_text(mean, record.get("ppl_std", 0.0), record.get("n", 1), 2)


def seeds_text(columns: list[Column]) -> str:
    """How many seeds the cells average, for the tables' captions."""
    counts = sorted({len(c.jobs) for c in columns})
    if counts == [1]:
        return "one seed per column (no spread: sweep `seed=0,1,2` for mean ± std)"
    shown = (
        " to ".join(str(n) for n in (counts[0], counts[-1]) if n)
        if len(counts) > 1
        else str(counts[0])
    )
    return f"mean ± sample std over n = {shown} seeds per column"


def trained_text(columns: list[Column], l0: int | None) -> str:
    """The training lengths, for the caption: L0, and a fine-tune's own length beside it."""
    scratch = f"trained at {l0:,} tokens" if l0 else "training lengths differ"
    tuned = sorted({c.tuned_at for c in columns if c.tuned_at})
    if not tuned:
        return scratch
    lengths = " and ".join(f"{n:,}" for n in tuned)
    counts = f" (× L_train counts from L0 = {l0:,}, the parent's training length)" if l0 else ""
    if all(c.tuned_at for c in columns):
        models = "a model" if len({id(c.jobs) for c in columns}) == 1 else "models"
        origin = f"{models} trained at {l0:,} tokens" if l0 else "models trained at other lengths"
        return f"fine-tuned (`posexp finetune`) at {lengths} tokens from {origin}{counts}"
    return f"{scratch}; the fine-tuned runs then at {lengths} tokens{counts}"


def render_extrapolation(ctx: ReportContext) -> str:
    """ALiBi-paper style tables (rows = length, columns = PE[+method]) and plots."""
    columns = extrapolation_columns(ctx)
    train_lengths = {c.l0 for c in columns}
    l0 = train_lengths.pop() if len(train_lengths) == 1 else None
    # The context-use scorers' curves over positions have a view of their own (context_use).
    protocols = [
        p
        for p in scorer_names(TEXT)
        if not _curve_protocol(p) and any(p == k[0] for c in columns for k in c.records)
    ]
    md = [
        "## Length extrapolation",
        "",
        f"Test-split perplexity by evaluation length (`posexp eval-extrapolate`); "
        f"{trained_text(columns, l0)}. "
        "Rows: PE, and PE+method for context-extension methods applied at evaluation time "
        "(factor = length / L0, the length the positions were first learned at, unless the run "
        "says otherwise; `baked:` the extension a run was fine-tuned with). "
        f"Columns: lengths, with their multiple of L_train. Lower is better; a flat row extrapolates. Cells: {seeds_text(columns)}.",
    ]
    samples = list(dict.fromkeys(c.series for c in columns if c.series))
    if samples:
        md += [
            "",
            f"Some cells were scored more than once, on different samples ({'; '.join(samples)}): "
            "each sample is its own column, never averaged with another, and a method is "
            "compared with no extension on the same sample only.",
        ]
    notes: list[str] = []
    csv_rows = []
    for protocol in protocols:
        lengths = sorted({k[1] for c in columns for k in c.records if k[0] == protocol})
        shown = [c for c in columns if any(k[0] == protocol for k in c.records)]
        # PEs and methods are rows, lengths (with their multiple of L_train) columns
        header = [
            "PE + method",
            *(f"{n:,} ({n / l0:g}×)" if l0 else f"{n:,}" for n in lengths),
        ]
        rows = [
            [c.label, *(_cell(c.records.get((protocol, n)), notes) for n in lengths)] for c in shown
        ]
        for n in lengths:
            csv_rows.append(
                {
                    "protocol": protocol,
                    "length": n,
                    **({"multiple": n / l0} if l0 else {}),
                    **{
                        f"{c.key or c.label}{suffix}": (c.records.get((protocol, n)) or {}).get(
                            field_name
                        )
                        for c in columns
                        for suffix, field_name in (("", "ppl"), (" std", "ppl_std"), (" n", "n"))
                    },
                }
            )
        stride = {
            r.get("stride")
            for c in columns
            for k, r in c.records.items()
            if k[0] == protocol and r.get("stride")
        }
        tokens = {
            r.get("tokens")
            for c in columns
            for k, r in c.records.items()
            if k[0] == protocol and r.get("tokens")
        }
        desc = (
            "non-overlapping windows"
            if protocol == "nonoverlap"
            else f"sliding window, stride {', '.join(map(str, sorted(stride)))}"
        )
        md += [
            "",
            f"### {protocol}: {desc}; {', '.join(map(str, sorted(tokens)))} scored tokens "
            "per length",
            "",
            md_table(header, rows, ["l"] + ["r"] * (len(header) - 1)),
        ]
        if l0 and len(lengths) > 1:
            md += [
                "",
                "ppl relative to the training length (shape comparison):",
                "",
                ratio_table(shown, protocol, lengths, l0),
            ]
        plot = extrapolation_plot(ctx, shown, protocol, l0)
        md += ["", f"![ppl vs length, {protocol}]({plot.name})"]
        gaps = gap_notes(shown, protocol)
        if gaps:  # a line drawn across them would show values never measured
            md += ["", f"Not scored, so its line breaks or ends there: {'; '.join(gaps)}."]
        left_out = unplotted(shown, protocol)
        if left_out:  # a line of fewer seeds beside the others would not compare like with like
            md += ["", f"Not plotted, no length scored in every seed: {'; '.join(left_out)}."]
    if notes:
        md += ["", *(f"[{i + 1}] {note}" for i, note in enumerate(notes))]
    reading = reading_sentences(columns, protocols, l0)
    if reading:
        md += ["", "Reading the table:", "", *(f"- {r}" for r in reading)]
    path = ctx.write_csv("report_extrapolation.csv", csv_rows)
    md += [
        "",
        f"All numbers: [{path.name}]({path.name}); per run: `<run>/eval/extrapolate.json`.",
        "",
        published_section(),
    ]
    return "\n".join(md)


def ratio_table(columns: list[Column], protocol: str, lengths: list[int], l0: int) -> str:
    """ppl(L) / ppl(L_train) per column (a row each): the mean over seeds of each seed's own
    ratio, ± std; lengths with their multiple as columns."""
    rows = []
    for c in columns:
        row: list[Any] = [c.label]
        for n in lengths:
            ratios = seed_ratios(c, protocol, n, l0)
            mean, std = mean_std(ratios)
            row.append(
                "—"
                if not ratios
                else f"{mean:.2f} ± {std:.2f}"
                if len(ratios) > 1
                else f"{mean:.2f}"
            )
        rows.append(row)
    header = ["PE + method", *(f"{n:,} ({n / l0:g}×)" for n in lengths)]
    return md_table(header, rows, ["l"] + ["r"] * len(lengths))


def perplexity_jobs(jobs: list[Job]) -> list[Job]:
    """Jobs with perplexity records of windows (task runs' accuracy records and context-use
    curves have their own views)."""
    return [
        j
        for j in jobs
        if j.extrapolate
        and any(
            r.get("metric", "ppl") == "ppl" and not _curve_protocol(r["protocol"])
            for r in j.extrapolate
        )
    ]


def _curve_protocol(protocol: str) -> bool:
    """True for a scorer whose records hold curves over positions (the context-use view's)."""
    return protocol in SCORERS and bool(SCORERS[protocol].lists)


register_report_view(
    "extrapolation", lambda jobs: bool(perplexity_jobs(jobs)), render_extrapolation, order=10
)
