"""The report's extrapolation view: test perplexity against length, per PE and method.

Rows = evaluation length, columns = PE (and PE+method), from each job's
``eval/extrapolate.json``, next to the ALiBi paper's published numbers (Press et al. 2022,
``configs/findings.yaml``).
"""

from __future__ import annotations

from typing import Any

from posexp.commands.report.jobs import Job, natural_order, swept_value
from posexp.commands.report.stats import (
    MIN_SEEDS,
    NOISE_STDS,
    beyond_noise,
    decimals_for,
    mean_std,
    mean_std_text,
    paired_differences,
)
from posexp.commands.report.view import ReportContext, md_table, register_report_view
from posexp.commands.report.views.extrapolation_data import Column, seed_records
from posexp.commands.report.views.extrapolation_paper import (
    published_section,
    seed_ratios,
    shape_sentences,
)
from posexp.commands.report.views.extrapolation_plot import extrapolation_plot
from posexp.commands.report.views.findings import job_pe
from posexp.extension import EXTENSIONS, baseline_method
from posexp.extension.spec import base_method, method_order
from posexp.scoring import TEXT, scorer_names


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
    groups: dict[tuple[Any, str], list[Job]] = {}
    for job in jobs:
        rest = ctx.rest(job, exclude=("pe", "seed"))
        groups.setdefault((job_pe(job), rest), []).append(job)
    pes = [pe for pe, _ in groups]
    columns = []
    for (pe, extra), seeds in groups.items():
        base, key = pe.label, pe.name + (" randomized" if pe.randomized else "")
        if pes.count(pe) > 1 and extra:  # several columns per PE: name them by the rest
            base, key = f"{base} [{extra}]", f"{key} [{extra}]"
        methods = list(dict.fromkeys(r["method"] for job in seeds for r in job.extrapolate))
        methods.sort(key=method_order)
        for method in methods:
            suffix = "" if method == baseline_method() else f"+{method}"
            recs = seed_records(seeds, method)
            columns.append(Column(base + suffix, seeds[0], method, recs, key + suffix, pe, seeds))
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


def render_extrapolation(ctx: ReportContext) -> str:
    """ALiBi-paper style tables (rows = length, columns = PE[+method]) and plots."""
    columns = extrapolation_columns(ctx)
    train_lengths = {c.job.train_length for c in columns}
    l0 = train_lengths.pop() if len(train_lengths) == 1 else None
    protocols = [
        p for p in scorer_names(TEXT) if any(p == k[0] for c in columns for k in c.records)
    ]
    md = [
        "## Length extrapolation",
        "",
        f"Test-split perplexity by evaluation length (`posexp eval-extrapolate`); "
        f"{'trained at ' + str(l0) + ' tokens' if l0 else 'training lengths differ'}. "
        "Columns: PE, and PE+method for context-extension methods applied at evaluation time "
        "(factor = length / training length unless the run says otherwise). "
        f"Lower is better; a flat column extrapolates. Cells: {seeds_text(columns)}.",
    ]
    notes: list[str] = []
    csv_rows = []
    for protocol in protocols:
        lengths = sorted({k[1] for c in columns for k in c.records if k[0] == protocol})
        header = ["length", *(["× L_train"] if l0 else []), *(c.label for c in columns)]
        rows = []
        for n in lengths:
            cells = [_cell(c.records.get((protocol, n)), notes) for c in columns]
            rows.append([n, *([f"{n / l0:g}"] if l0 else []), *cells])
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
            md_table(header, rows, ["r"] * len(header)),
        ]
        if l0 and len(lengths) > 1:
            md += [
                "",
                "ppl relative to the training length (shape comparison):",
                "",
                ratio_table(columns, protocol, lengths, l0),
            ]
        plot = extrapolation_plot(ctx, columns, protocol, l0)
        md += ["", f"![ppl vs length, {protocol}]({plot.name})"]
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


def _pairs(
    columns: list[Column], a: str, b: str, protocol: str, past: int | None
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(record of method a, record of method b) of the same jobs at each length past ``past``."""
    out = []
    for ca in columns:
        for cb in columns:
            if ca.jobs is cb.jobs and (ca.method, cb.method) == (a, b):
                for (p, n), ra in ca.records.items():
                    rb = cb.records.get((p, n))
                    if (
                        p == protocol
                        and (past is None or n > past)
                        and rb
                        and ra.get("ppl") is not None
                        and rb.get("ppl") is not None
                    ):
                        out.append((ra, rb))
    return out


def reading_sentences(columns: list[Column], protocols: list[str], l0: int | None) -> list[str]:
    """What the tables show, each sentence computed from the numbers it describes."""
    out = []
    first = "nonoverlap" if "nonoverlap" in protocols else protocols[0]
    for name, method in EXTENSIONS.items():
        if method.static_form is None:
            continue
        same = _pairs(columns, name, method.static_form, first, None)
        if not same:
            continue
        twin = method.static_form
        gap = max(abs(a["ppl"] / b["ppl"] - 1) for a, b in same)
        if gap < 0.005:
            out.append(
                f"{name} equals {twin} here (largest difference {gap:.2%} over {len(same)} "
                f"cells, {first}): every window starts at position 0, so at length L {name}'s "
                f"base is {twin}'s with s = L / L_train; they differ only while a sequence "
                "grows (generation with a KV cache)."
            )
        else:
            out.append(f"{name} and {twin} differ by up to {gap:.1%} ({first}, {len(same)} cells).")
    if len(protocols) > 1:
        both = []
        for c in columns:
            for (p, n), r in c.records.items():
                other = c.records.get(("nonoverlap", n))
                if (
                    p == "sliding"
                    and (l0 is None or n > l0)
                    and other
                    and r.get("ppl") is not None
                    and other.get("ppl") is not None
                ):
                    both.append(r["ppl"] / other["ppl"])
        if both:
            higher = sum(x > 1 for x in both)
            median = sorted(both)[len(both) // 2]
            why = (
                "every sliding-scored token sits at position L - stride or later, past the "
                "trained positions"
                if higher > len(both) / 2
                else "every sliding-scored token sees at least L - stride tokens of context, which "
                "helps a model that extrapolates"
            )
            out.append(
                f"past the training length, sliding windows give a higher ppl than "
                f"non-overlapping ones in {higher} of {len(both)} cells (median ratio "
                f"{median:.2f}): {why}."
            )
    baseline = baseline_method()
    judged = [
        label
        for label in dict.fromkeys(c.method for c in columns)
        if base_method(label) in EXTENSIONS and EXTENSIONS[base_method(label)].zero_shot_verdict
    ]
    for method in judged:
        after = (
            "it needs no fine-tuning (it changes attention, not the weights)"
            if EXTENSIONS[base_method(method)].training_free
            else "`posexp finetune` trains at the longer length first"
        )
        for base in (c for c in columns if c.method == baseline):  # one sentence per PE
            same_pe = [c for c in columns if c.jobs is base.jobs]
            pairs = _pairs(same_pe, method, baseline, first, l0)
            if not pairs:
                continue
            out.append(verdict_sentence(method, base.label, pairs, first, after))
    if l0:
        out += shape_sentences(columns, first, l0)
    out += ranking_sentence(columns, first)
    return out


LEVEL = 0.01  # a cell within 1% of no extension is level with it, neither better nor worse


def verdict_sentence(
    method: str,
    label: str,
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    protocol: str,
    after: str,
) -> str:
    """A method against no extension over the cells past the training length: better, worse
    or level (cells within LEVEL), with the median change and the method's own caveat."""
    changes = sorted(a["ppl"] / b["ppl"] - 1 for a, b in pairs)
    median = changes[len(changes) // 2]
    better = sum(c < -LEVEL for c in changes)
    worse = sum(c > LEVEL for c in changes)
    n = len(changes)
    if better > n / 2:
        verdict = f"better than no extension for {label} in {better} of {n} cells"
    elif worse > n / 2:
        verdict = f"worse than no extension for {label} in {worse} of {n} cells"
    else:
        verdict = (
            f"level with no extension for {label} ({n - better - worse} of {n} cells within "
            f"{LEVEL:.0%}, {better} better, {worse} worse)"
        )
    caveat = EXTENSIONS[base_method(method)].caveat
    change = f"{median:+.1%}".replace("-0.0%", "0.0%")
    return (
        f"applied zero-shot (no fine-tuning), {method} is {verdict} past the training length "
        f"({protocol}; median change {change}, a cell counts beyond ±{LEVEL:.0%})"
        f"{noise_clause(pairs)}; {after}." + (f" Caveat: {method}: {caveat}." if caveat else "")
    )


def noise_clause(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """How many of the paired differences exceed 2 std of their own per-seed differences."""
    seeds = min(len(a.get("ppls", [a["ppl"]])) for a, _ in pairs)
    if seeds < MIN_SEEDS:
        return " (one seed per cell: no verdict on seed noise)" if seeds == 1 else ""
    beyond = 0
    for a, b in pairs:
        mean, std, _ = paired_differences(a["ppls"], b["ppls"])
        beyond += abs(mean) > NOISE_STDS * std
    return (
        f"; the per-seed difference exceeds {NOISE_STDS:g} std of itself in {beyond} of "
        f"{len(pairs)} cells (n = {seeds} seeds)"
    )


def ranking_sentence(columns: list[Column], protocol: str) -> list[str]:
    """At the longest length, the best and second-best PE without extension, and whether their
    gap exceeds the seeds' spread."""
    scored = []
    for c in columns:
        if c.method != baseline_method():
            continue
        cells = [(n, r) for (p, n), r in c.records.items() if p == protocol]
        longest = max(cells, default=None, key=lambda x: x[0])
        if longest and longest[1].get("ppl") is not None:
            scored.append((longest[1]["ppl"], longest[0], c))
    lengths = {n for _, n, _ in scored}
    if len(scored) < 2 or len(lengths) != 1:
        return []
    scored.sort(key=lambda x: x[0])
    (best, n, a), (second, _, b) = scored[0], scored[1]
    ra, rb = a.records[(protocol, n)], b.records[(protocol, n)]
    d = decimals_for(best)
    if round(second - best, d) == 0:  # a tie as printed: no leader to name
        return [
            f"at {n:,} tokens ({protocol}), {a.label} and {b.label} have the lowest ppl without "
            f"extension, level at {best:.{d}f}."
        ]
    words = beyond_noise(
        second - best,
        [ra.get("ppl_std", 0.0), rb.get("ppl_std", 0.0)],
        min(ra.get("n", 1), rb.get("n", 1)),
    )
    return [
        f"at {n:,} tokens ({protocol}), {a.label} has the lowest ppl without extension "
        f"({best:.{d}f}), ahead of {b.label} ({second:.{d}f}) by {second - best:.{d}f}: {words}."
    ]


def ratio_table(columns: list[Column], protocol: str, lengths: list[int], l0: int) -> str:
    """ppl(L) / ppl(L_train) per column: the mean over seeds of each seed's own ratio, ± std."""
    rows = []
    for n in lengths:
        row: list[Any] = [n, f"{n / l0:g}"]
        for c in columns:
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
    header = ["length", "× L_train", *(c.label for c in columns)]
    return md_table(header, rows, ["r"] * len(header))


def perplexity_jobs(jobs: list[Job]) -> list[Job]:
    """Jobs with perplexity records (task runs' accuracy records have their own views)."""
    return [
        j
        for j in jobs
        if j.extrapolate and any(r.get("metric", "ppl") == "ppl" for r in j.extrapolate)
    ]


register_report_view(
    "extrapolation", lambda jobs: bool(perplexity_jobs(jobs)), render_extrapolation, order=10
)
