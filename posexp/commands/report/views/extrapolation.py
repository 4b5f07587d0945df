"""The report's extrapolation view: test perplexity against length, per PE and method.

Rows = evaluation length, columns = PE (and PE+method), from each job's
``eval/extrapolate.json``, next to the ALiBi paper's published numbers (Press et al. 2022,
``configs/findings.yaml``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posexp.commands.extrapolate.plan import PROTOCOLS
from posexp.commands.report.jobs import Job, natural_order
from posexp.commands.report.view import ReportContext, fmt, md_table, register_report_view
from posexp.commands.report.views.findings import findings, job_pe
from posexp.pe.base import PEDisplay, describe_pe

# How a ppl ratio to the training length reads, below each bound (else "explodes").
SHAPES = ((1.25, "stays flat"), (5.0, "degrades"))


@dataclass
class Column:
    """One column of the extrapolation table: a job's PE with one method."""

    label: str  # shown in tables and legends (the PE's declared label)
    job: Job
    method: str
    records: dict[tuple[str, int], dict[str, Any]]
    key: str = ""  # its CSV column (the PE's registered name); "": the label
    pe: PEDisplay | None = None


def extrapolation_columns(ctx: ReportContext) -> list[Column]:
    """Columns in the PEs' declared order (posexp/pe), each PE's methods in registry order."""
    from posexp.extension import EXTENSIONS

    jobs = perplexity_jobs(ctx.jobs)
    pes = [job_pe(j) for j in jobs]
    method_order = ["none", *EXTENSIONS]
    columns = []
    for job in sorted(
        jobs,
        key=lambda j: (
            job_pe(j).sort_key,
            tuple(natural_order(j.params.get(k)) for k in ctx.swept),
        ),
    ):
        pe = job_pe(job)
        base, key = pe.label, pe.name + (" randomized" if pe.randomized else "")
        if pes.count(pe) > 1:  # several jobs per PE: name them by their other swept params
            extra = ctx.label(job, exclude=("pe",))
            base, key = (f"{base} [{extra}]", f"{key} [{extra}]") if extra else (base, key)
        methods = list(dict.fromkeys(r["method"] for r in job.extrapolate))
        methods.sort(
            key=lambda m: -1 if ":" in m else method_order.index(m) if m in method_order else 99
        )
        for method in methods:
            recs = {
                (r["protocol"], r["length"]): r for r in job.extrapolate if r["method"] == method
            }
            suffix = "" if method == "none" else f"+{method}"
            columns.append(Column(base + suffix, job, method, recs, key + suffix, pe))
    return columns


def _cell(record: dict[str, Any] | None, notes: list[str]) -> str:
    if record is None:
        return ""
    if record.get("ppl") is None:
        note = record.get("note") or "not evaluated"
        if note not in notes:
            notes.append(note)
        return f"n/a [{notes.index(note) + 1}]"
    return fmt(float(record["ppl"]))


def render_extrapolation(ctx: ReportContext) -> str:
    """ALiBi-paper style tables (rows = length, columns = PE[+method]) and plots."""
    columns = extrapolation_columns(ctx)
    train_lengths = {c.job.train_length for c in columns}
    l0 = train_lengths.pop() if len(train_lengths) == 1 else None
    protocols = [p for p in PROTOCOLS if any(p == k[0] for c in columns for k in c.records)]
    md = [
        "## Length extrapolation",
        "",
        f"Test-split perplexity by evaluation length (`posexp eval-extrapolate`); "
        f"{'trained at ' + str(l0) + ' tokens' if l0 else 'training lengths differ'}. "
        "Columns: PE, and PE+method for context-extension methods applied at evaluation time "
        "(factor = length / training length unless the run says otherwise). "
        "Lower is better; a flat column extrapolates.",
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
                        c.key or c.label: (c.records.get((protocol, n)) or {}).get("ppl")
                        for c in columns
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


def shape(ratio: float) -> str:
    """How a ppl ratio to the training length reads: stays flat, degrades or explodes."""
    return next((words for bound, words in SHAPES if ratio < bound), "explodes")


def _pairs(
    columns: list[Column], a: str, b: str, protocol: str, past: int | None
) -> list[tuple[float, float]]:
    """(ppl of method a, ppl of method b) of the same job at each length past ``past``."""
    out = []
    for ca in columns:
        for cb in columns:
            if ca.job is cb.job and (ca.method, cb.method) == (a, b):
                for (p, n), ra in ca.records.items():
                    rb = cb.records.get((p, n))
                    if (
                        p == protocol
                        and (past is None or n > past)
                        and rb
                        and ra.get("ppl") is not None
                        and rb.get("ppl") is not None
                    ):
                        out.append((ra["ppl"], rb["ppl"]))
    return out


def reading_sentences(columns: list[Column], protocols: list[str], l0: int | None) -> list[str]:
    """What the tables show, each sentence computed from the numbers it describes."""
    out = []
    first = "nonoverlap" if "nonoverlap" in protocols else protocols[0]
    same = _pairs(columns, "dynamic_ntk", "ntk", first, None)
    if same:
        gap = max(abs(a / b - 1) for a, b in same)
        if gap < 0.005:
            out.append(
                f"dynamic_ntk equals ntk here (largest difference {gap:.2%} over {len(same)} "
                f"cells, {first}): every window starts at position 0, so at length L dynamic "
                "NTK's base is static NTK's with s = L / L_train; they differ only while a "
                "sequence grows (generation with a KV cache)."
            )
        else:
            out.append(
                f"dynamic_ntk and ntk differ by up to {gap:.1%} ({first}, {len(same)} cells)."
            )
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
    for method in ("pi", "yarn"):
        pairs = _pairs(columns, method, "none", first, l0)
        if pairs:
            worse = sum(a > b for a, b in pairs)
            verdict = "worse" if worse > len(pairs) / 2 else "better"
            k = worse if verdict == "worse" else len(pairs) - worse
            out.append(
                f"applied zero-shot (no fine-tuning), {method} is {verdict} than no "
                f"extension in {k} of {len(pairs)} cells past the training length "
                f"({first}); `posexp finetune` trains at the longer length first."
            )
    if l0:
        out += shape_sentences(columns, first, l0)
    return out


def shape_sentences(columns: list[Column], protocol: str, l0: int) -> list[str]:
    """The shape of each PE's column without extension, beside the paper's for the same PE at
    the published length nearest in multiples of the training length (configs/findings.yaml)."""
    paper = findings()["extrapolation"]
    p0 = paper["train_length"]
    clauses = []
    for c in columns:
        published = paper["ppl"].get(c.pe.name) if c.pe and not c.pe.randomized else None
        base = c.records.get((protocol, l0), {}).get("ppl")
        past = [
            (n, r["ppl"])
            for (p, n), r in c.records.items()
            if p == protocol and n > l0 and r.get("ppl") is not None
        ]
        if c.method != "none" or not published or not base or not past:
            continue
        n, ppl = max(past)
        i = min(
            (i for i, v in enumerate(published) if i and v is not None),
            key=lambda i: abs(math.log(paper["lengths"][i] / p0 * l0 / n)),
        )
        mine, theirs = ppl / base, published[i] / published[0]
        clauses.append(
            f"{c.label} {shape(mine)} here ({mine:.2f}× at {n / l0:g}× L_train; in the "
            f"paper it {shape(theirs)}, {theirs:.2f}× at {paper['lengths'][i] / p0:.1f}×)"
        )
    if not clauses:
        return []
    return [
        f"compared with {paper['cite']}, ppl relative to the training length ({protocol}): "
        f"{'; '.join(clauses)}."
    ]


def ratio_table(columns: list[Column], protocol: str, lengths: list[int], l0: int) -> str:
    """ppl(L) / ppl(L_train) per column."""
    rows = []
    for n in lengths:
        row: list[Any] = [n, f"{n / l0:g}"]
        for c in columns:
            base, rec = c.records.get((protocol, l0)), c.records.get((protocol, n))
            ok = base and rec and base.get("ppl") and rec.get("ppl") is not None
            row.append(f"{rec['ppl'] / base['ppl']:.2f}" if ok else "—")
        rows.append(row)
    header = ["length", "× L_train", *(c.label for c in columns)]
    return md_table(header, rows, ["r"] * len(header))


def published_section() -> str:
    """The ALiBi paper's numbers (configs/findings.yaml), with ratios to the training length."""
    paper = findings()["extrapolation"]
    p0, series = paper["train_length"], paper["ppl"]
    pes = sorted((describe_pe(name) for name in series), key=lambda d: d.sort_key)
    rows = []
    for i, n in enumerate(paper["lengths"]):
        cells = []
        for pe in pes:
            v, v0 = series[pe.name][i], series[pe.name][0]
            cells.append("OOM" if v is None else f"{v:.2f} ({v / v0:.2f}×)")
        rows.append([n, f"{n / p0:.1f}", *cells])
    shapes = []
    for pe in pes:
        i = max(i for i, v in enumerate(series[pe.name]) if v is not None)
        ratio = series[pe.name][i] / series[pe.name][0]
        oom = ", out of memory past it" if i < len(paper["lengths"]) - 1 else ""
        shapes.append(
            f"{pe.label} {shape(ratio)} ({ratio:.2f}× at {paper['lengths'][i] / p0:.1f}×{oom})"
        )
    return "\n".join(
        [
            "### Published, for shape comparison",
            "",
            f"{paper['cite']}, {paper['setting']} (ratio to L = {p0}). Absolute numbers differ by "
            f"design (corpus, size); compare the shape: {', '.join(shapes)}.",
            "",
            md_table(
                ["L_valid", "× L_train", *(pe.label for pe in pes)], rows, ["r"] * (len(pes) + 2)
            ),
        ]
    )


def extrapolation_plot(
    ctx: ReportContext, columns: list[Column], protocol: str, l0: int | None
) -> Path:
    """ppl against length (log-log, plain ticks), one line per column, styles that stay distinct."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.commands.extrapolate.plots import MARKERS, plain_log_axes

    fig, ax = plt.subplots(figsize=(9.5, 5.0), layout="constrained")
    palette = plt.get_cmap("tab10" if len(columns) <= 10 else "tab20").colors
    lengths: set[int] = set()
    for i, c in enumerate(columns):
        pts = sorted(
            (n, r["ppl"])
            for (p, n), r in c.records.items()
            if p == protocol and r.get("ppl") is not None
        )
        if pts:
            lengths.update(n for n, _ in pts)
            style = "-" if c.method == "none" else "--"
            ax.plot(
                *zip(*pts, strict=True),
                style,
                marker=MARKERS[i % len(MARKERS)],
                markersize=8 - 1.5 * (i % 4),
                label=c.label,
                color=palette[i % len(palette)],
            )
    if l0:
        ax.axvline(l0, color="grey", linestyle=":", linewidth=1, label=f"training length ({l0:,})")
    if lengths:
        plain_log_axes(ax, sorted(lengths))
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("test perplexity (log scale)")
    ax.set_title(
        f"Test perplexity against evaluation length ({protocol} windows); "
        "solid: no extension, dashed: with one",
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)
    return ctx.save_figure(fig, f"report_extrapolation_{protocol}.png")


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
