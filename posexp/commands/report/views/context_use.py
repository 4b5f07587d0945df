"""The report's context-use view: loss by position within a document (``doc_position``) and
the gain from the context beyond L0 (``context_gain``), each a curve over log-scale position
buckets averaged over seeds.

A series is one PE (with the other settings that tell jobs apart, the seed left out) and one
method spec; its curve is at the longest length every seed of it scored, each bucket the mean
over the seeds that measured it, with a band of one sample std either side and n. The figure
shows each PE's model as trained (no extension), one colour per PE (``posexp.results.style``);
the CSV holds every series in long format, one row per bucket. Its sentences are computed from
those numbers and judged by the one rule of every comparison (``posexp.results.verdict``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from posexp.commands.report.jobs import Job
from posexp.commands.report.stats import mean_std
from posexp.commands.report.view import ReportContext, md_table, register_report_view
from posexp.commands.report.views.findings import job_pe
from posexp.extension import baseline_method
from posexp.pe.base import PEDisplay
from posexp.results.curves import CONTEXT_CURVES, bucket_bands
from posexp.results.verdict import compare, paired

# protocol -> (the per-bucket field drawn, what it is, its headline field)
CURVES = {
    protocol: (*CONTEXT_CURVES[protocol], head)
    for protocol, head in (("doc_position", "ppl"), ("context_gain", "gain"))
}
COLUMNS = [
    "protocol",
    "quantity",
    "series",
    "pe",
    "method",
    "length",
    "l0",
    "bucket_start",
    "bucket_end",
    "mean",
    "std",
    "n",
]


@dataclass
class Series:
    """One PE (and its other settings) with one method spec, over its seeds, at one length:
    each seed's record of one context-use protocol."""

    label: str
    pe: PEDisplay
    method: str  # the spec's label
    name: str  # the method's name
    length: int
    l0: int | None
    records: list[dict[str, Any]] = field(default_factory=list)  # one per seed

    @property
    def edges(self) -> list[int]:
        return list(self.records[0]["position_edges"])

    def per_seed(self, name: str) -> list[list[float | None]]:
        """Each seed's list ``name`` (a curve over the buckets)."""
        return [list(r.get(name) or []) for r in self.records]

    def seeds_of(self, name: str) -> list[float]:
        """Each seed's number ``name``, those measured."""
        return [float(r[name]) for r in self.records if _finite(r.get(name))]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def series_of(ctx: ReportContext, protocol: str) -> list[Series]:
    """The series of ``protocol`` among the report's jobs, in the PEs' declared order, each at
    the longest length every seed scored (a seed's record of the largest sample there)."""
    groups: dict[tuple[Any, str, str], list[Job]] = {}
    for job in ctx.jobs:
        if not job.config or not job.extrapolate:
            continue
        for method in dict.fromkeys(
            r["method"] for r in job.extrapolate if r["protocol"] == protocol
        ):
            key = (job_pe(job), ctx.rest(job, ("seed", "pe")), method)
            groups.setdefault(key, []).append(job)
    out = []
    for (pe, rest, method), jobs in groups.items():
        mine = [
            [
                r
                for r in job.extrapolate
                if r["protocol"] == protocol
                and r["method"] == method
                and r.get(CURVES[protocol][0]) is not None
            ]
            for job in jobs
        ]
        common = set.intersection(*({r["length"] for r in recs} for recs in mine))
        if not common:
            continue
        length = max(common)
        picked = [
            max(
                (r for r in recs if r["length"] == length),
                key=lambda r: r.get("tokens") or 0,
            )
            for recs in mine
        ]
        edges = picked[0].get("position_edges")
        picked = [r for r in picked if r.get("position_edges") == edges]
        label = pe.label + (f" · {rest}" if rest else "")
        name = picked[0].get("name") or method
        out.append(Series(label, pe, method, name, length, jobs[0].train_length, picked))
    return sorted(out, key=lambda s: (s.pe.sort_key, s.label, s.method != baseline_method()))


def bucket_text(lo: int, hi: int) -> str:
    """A bucket's positions as words: ``512–1,023`` (``0`` for one position)."""
    return f"{lo:,}" if hi - lo == 1 else f"{lo:,}–{hi - 1:,}"


def csv_rows(protocol: str, series: list[Series]) -> list[dict[str, Any]]:
    """The curves of ``series`` in long format: one row per series and bucket."""
    name = CURVES[protocol][0]
    rows = []
    for s in series:
        edges = s.edges
        for (lo, hi), (mean, std, n) in zip(
            zip(edges, edges[1:], strict=False), bucket_bands(s.per_seed(name)), strict=False
        ):
            rows.append(
                {
                    "protocol": protocol,
                    "quantity": name,
                    "series": s.label,
                    "pe": s.pe.name,
                    "method": s.method,
                    "length": s.length,
                    "l0": s.l0,
                    "bucket_start": lo,
                    "bucket_end": hi,
                    "mean": None if n == 0 else mean,
                    "std": None if n < 2 else std,
                    "n": n,
                }
            )
    return rows


def figure(protocol: str, series: list[Series]) -> Any:
    """The protocol's curves of the models as trained (no extension), one colour per PE,
    bands of one seed std (``posexp.results.curves``)."""
    from posexp.results.curves import Panel, bucket_curve, from_position, plot_buckets
    from posexp.results.style import display_style

    name, quantity, _ = CURVES[protocol]
    curves = []
    for s in series:
        if s.method != baseline_method():
            continue
        n = len(s.records)
        style = display_style(s.pe)
        label = f"{s.label} at {s.length:,}" + (f" (n = {n})" if n > 1 else "")
        curves.append(bucket_curve(label, s.edges, s.per_seed(name), style))
    what = "document position" if protocol == "doc_position" else "position past L0"
    l0s = sorted({s.l0 for s in series if s.l0})
    panels = [Panel(f"{quantity.split(' (')[0]} by {what}", curves)]  # units: on the y axis
    if protocol == "doc_position" and l0s:
        # The first positions' loss is many times the rest: a second panel from L0 / 2 on
        # shows the part that says whether the context past L0 is used.
        start = l0s[0] // 2
        panels.append(
            Panel(f"the same from position {start:,} on", [from_position(c, start) for c in curves])
        )
    return plot_buckets(
        panels,
        f"Context use ({protocol}): seed mean per position bucket, band ± one seed std",
        quantity,
        l0s,
        gain=protocol == "context_gain",
        share_y=False,
    )


def position_sentences(series: list[Series]) -> list[str]:
    """doc_position: per PE as trained (no extension), its loss in the farthest bucket against
    the last bucket inside L0 (per seed, paired), and the PEs against the first there."""
    out = []
    far_of: dict[str, tuple[str, list[float], Series]] = {}
    for s in series:
        edges = s.edges
        if s.method != baseline_method() or not s.l0 or len(edges) < 3 or edges[-2] < s.l0:
            continue
        inside = max(i for i in range(len(edges) - 1) if edges[i + 1] <= s.l0)
        far, ref = len(edges) - 2, inside
        pairs = [
            (c[far], c[ref])
            for c in s.per_seed("position_loss")
            if len(c) > far and _finite(c[far]) and _finite(c[ref])
        ]
        if not pairs:
            continue
        a, b = [p[0] for p in pairs], [p[1] for p in pairs]
        drop, drop_std = mean_std([y - x for x, y in pairs])
        where, base = (
            bucket_text(edges[far], edges[far + 1]),
            bucket_text(edges[ref], edges[ref + 1]),
        )
        way = "lower" if drop >= 0 else "higher"
        spread = f" ± {drop_std:.3f}" if len(pairs) > 1 else ""
        out.append(
            f"{s.label} (length {s.length:,}): the loss at positions {where} is "
            f"{abs(drop):.3f}{spread} nats {way} than at {base}, inside L0 "
            f"({paired(a, b).words()})."
        )
        far_of[s.label] = (where, a, s)
    labels = list(far_of)
    for other in labels[1:]:
        where, b, sb = far_of[other]
        _, a, sa = far_of[labels[0]]
        if sa.length == sb.length:
            out.append(compare(other, b, labels[0], a, what=f"loss at document positions {where}"))
    return out


def gain_sentences(series: list[Series]) -> list[str]:
    """context_gain: per PE as trained (no extension), its mean gain (against none) and
    key-token share; the PEs against the first on the gain."""
    out = []
    gains: dict[str, list[float]] = {}
    for s in series:
        g = s.seeds_of("gain")
        if s.method != baseline_method() or not g:
            continue
        mean, std = mean_std(g)
        share, share_std = mean_std(s.seeds_of("key_share"))
        spread = f" ± {std:.4f}" if len(g) > 1 else ""
        key = f"{100 * share:.3f}%" + (f" ± {100 * share_std:.3f}%" if len(g) > 1 else "")
        out.append(
            f"{s.label} (length {s.length:,}): tokens at positions {s.l0:,} and beyond gain "
            f"{mean:.4f}{spread} nats each from the context past L0 = {s.l0:,} (against no "
            f"gain: {paired(g, [0.0] * len(g)).words()}); key tokens (gain > 2 nats, loss < 2 "
            f"nats): {key} of them."
        )
        gains[s.label] = g
    labels = list(gains)
    for other in labels[1:]:
        out.append(
            compare(
                other,
                gains[other],
                labels[0],
                gains[labels[0]],
                what="context gain past L0",
                lower_is_better=False,
            )
        )
    return out


def headline_table(protocol: str, series: list[Series]) -> str:
    """Per series: length, documents, the headline and the key tokens, mean ± std over seeds."""
    head = CURVES[protocol][2]

    def cell(values: list[float], digits: int, of: int, scale: float = 1.0) -> str:
        """mean ± std of the seeds that measured it, and their count where not all did."""
        if not values:
            return "—"
        m, sd = mean_std([v * scale for v in values])
        text = f"{m:.{digits}f}" + (f" ± {sd:.{digits}f}" if len(values) > 1 else "")
        return text + (f" (n = {len(values)})" if len(values) < of else "")

    header = ["series", "method", "length", "documents", head]
    if protocol == "context_gain":
        header += ["key tokens (%)", "key-token ppl"]
    rows = []
    for s in series:
        docs = sorted({int(r.get("documents") or 0) for r in s.records})
        row = [s.label, s.method, f"{s.length:,}", "/".join(map(str, docs))]
        n = len(s.records)
        row.append(cell(s.seeds_of(head), 4 if head == "gain" else 2, n))
        if protocol == "context_gain":
            row += [cell(s.seeds_of("key_share"), 3, n, 100.0), cell(s.seeds_of("key_ppl"), 2, n)]
        rows.append(row)
    header.append("n")
    rows = [r + [str(len(s.records))] for r, s in zip(rows, series, strict=True)]
    return md_table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2))


INTRO = {
    "doc_position": (
        "Loss by position within a document (`--protocol doc_position`): windows start at "
        "documents' starts and never cross one, only documents of at least the length are "
        "used; a curve that keeps falling past L0 uses the longer context, one that rises "
        "breaks there."
    ),
    "context_gain": (
        "The gain from context (`--protocol context_gain`): each token at position >= L0 "
        "scored with its whole document before it, minus the same token scored with L0 tokens "
        "of context (stride S: L0 - S + 1 to L0); positive: the model uses the tokens past L0. "
        "Key tokens after LongPPL (Fang et al. 2024): gain > 2 nats and loss < 2 nats."
    ),
}


def render(ctx: ReportContext) -> str:
    """The context-use section: per protocol a figure, a table and sentences; one CSV."""
    md = ["## Context use", ""]
    rows: list[dict[str, Any]] = []
    for protocol in CURVES:
        series = series_of(ctx, protocol)
        if not series:
            continue
        rows += csv_rows(protocol, series)
        md += [f"### {protocol}", "", INTRO[protocol], ""]
        if any(s.method == baseline_method() for s in series):
            fig = figure(protocol, series)
            path = ctx.save_figure(fig, f"report_context_use_{protocol}.png")
            md += [f"![{protocol}]({path.name})", ""]
        md += [headline_table(protocol, series), ""]
        sentences = (
            position_sentences(series) if protocol == "doc_position" else gain_sentences(series)
        )
        md += [f"- {t}" for t in sentences]
        md.append("")
    path = ctx.write_csv("report_context_use.csv", rows, COLUMNS)
    md += [
        f"Every series' curve (long format, one row per position bucket): [{path.name}]"
        f"({path.name}); per run: `<run>/eval/extrapolate.json`."
    ]
    return "\n".join(md)


def detect(jobs: list[Any]) -> bool:
    """Any job with a context-use record."""
    return any(
        r["protocol"] in CURVES for j in jobs if hasattr(j, "path") for r in (j.extrapolate or [])
    )


register_report_view("context_use", detect, render, order=35)
