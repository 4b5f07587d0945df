"""The extrapolation view's figure: test perplexity against length, as small multiples.

The first panel compares the encodings without extension; each encoding evaluated with
extension methods then gets panels of its own (its plain line and its methods, grouped by
method, at most ``MOST_CURVES`` lines a panel), so no panel holds more than one encoding's
methods. Every PE and method spec keeps the style the registry gives it (posexp.results.style)
in every panel and file, the y axis is shared, and the seeds' spread is a band around each
plain line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posexp.commands.report.view import ReportContext
from posexp.commands.report.views.extrapolation_data import Column
from posexp.extension import baseline_method
from posexp.results.curves import (
    MOST_CURVES,
    Curve,
    Panel,
    gapped,
    method_panels,
    plot_panels,
    spec_style,
)
from posexp.results.style import Style, display_style, method_style, pe_style


def _points(c: Column, protocol: str) -> list[tuple[int, float]]:
    return sorted(
        (n, r["ppl"])
        for (p, n), r in c.records.items()
        if p == protocol and r.get("ppl") is not None
    )


def missing_lengths(c: Column, protocol: str, lengths: list[int]) -> list[int]:
    """The lengths of ``lengths`` (a panel's) at which the column has no point."""
    return gapped(dict(_points(c, protocol)), lengths)[2]


def _panels(columns: list[Column], protocol: str) -> list[list[Column]]:
    """The columns of each panel, as drawn: the plain ones (MOST_CURVES a panel), then each PE's
    plain lines with its methods, grouped by method, at most MOST_CURVES lines a panel."""
    return [bases + methods for bases, methods, _ in _layout(columns, protocol)]


def _layout(columns: list[Column], protocol: str) -> list[tuple[list[Column], list[Column], str]]:
    """(plain columns, method columns, title) of each panel."""
    columns = [c for c in columns if _points(c, protocol)]
    plain = [c for c in columns if c.method == baseline_method()]
    out = []
    for start in range(0, max(1, len(plain)), MOST_CURVES):
        title = "every encoding, no extension"
        if len(plain) > MOST_CURVES:
            title += f" ({start // MOST_CURVES + 1} of {-(-len(plain) // MOST_CURVES)})"
        out.append((plain[start : start + MOST_CURVES], [], title))
    for jobs in {id(c.jobs): c.jobs for c in plain}.values():
        bases = [c for c in plain if c.jobs is jobs]
        methods = [c for c in columns if c.jobs is jobs and c.method != baseline_method()]
        if not methods:
            continue
        labels = list(dict.fromkeys(c.method for c in methods))
        names = {c.method: method_name(c) for c in methods}
        pe_label = bases[0].label.removesuffix(f" [{bases[0].series}]")
        for group in method_panels(labels, names, MOST_CURVES - len(bases)):
            mine = [c for c in methods if c.method in group]
            named = ", ".join(dict.fromkeys(names[m] for m in group))
            out.append((bases, mine, f"{pe_label} with {named}"))
    return out


def gap_notes(columns: list[Column], protocol: str) -> list[str]:
    """Each plotted column scored at fewer lengths than the others of its panel, with the
    lengths it lacks (where its line breaks or stops), for the figure's caption."""
    out: dict[str, list[int]] = {}
    for panel in _panels(columns, protocol):
        lengths = sorted({n for c in panel for n, _ in _points(c, protocol)})
        for c in panel:
            lacks = missing_lengths(c, protocol, lengths)
            if lacks:
                out[c.label] = sorted({*out.get(c.label, []), *lacks})
    return [f"{label} at {', '.join(f'{n:,}' for n in ns)}" for label, ns in out.items()]


def unplotted(columns: list[Column], protocol: str) -> list[str]:
    """The columns with records of ``protocol`` but no cell a line can show (none scored in
    every seed), each with the reason its cells give."""
    out = []
    for c in columns:
        records = [r for (p, _), r in c.records.items() if p == protocol]
        if records and not _points(c, protocol):
            why = next((r["note"] for r in records if r.get("note")), "not evaluated")
            out.append(f"{c.label} ({why})")
    return out


def _seeds(c: Column) -> int:
    return max((r.get("n", 1) for r in c.records.values()), default=1)


# A PE's plain series after its first (another sample size, stride or precision).
SERIES_STYLES = ("-", "-.", ":", (0, (5, 1)))


def _style(c: Column, plain: list[Column]) -> Any:
    same_pe = [p for p in plain if p.jobs is c.jobs]
    return SERIES_STYLES[same_pe.index(c) % len(SERIES_STYLES)]


def method_name(c: Column) -> str:
    """The name of the method a column's records were scored with (its label: display only)."""
    return next((r["name"] for r in c.records.values() if r.get("name")), c.method)


def column_style(c: Column) -> Style:
    """The registry's style of a column's encoding (randomized positions: a style of their own)."""
    if c.pe is None:
        return pe_style(c.label)
    return display_style(c.pe)


def curve_of(c: Column, protocol: str, label: str, style: Style, dash: Any, band: bool) -> Curve:
    """A column as a curve: its mean at each length, n in its label, its seeds' spread."""
    seeds = _seeds(c)
    spread = {
        n: (r["ppl"] - r["ppl_std"], r["ppl"] + r["ppl_std"])
        for (p, n), r in c.records.items()
        if band and p == protocol and r.get("ppl") is not None and r.get("n", 1) > 1
    }
    text = label + (f" (n = {seeds})" if seeds > 1 else "")
    return Curve(text, dict(_points(c, protocol)), style, dash, spread)


def extrapolation_plot(
    ctx: ReportContext, columns: list[Column], protocol: str, l0: int | None
) -> Path:
    """ppl against length: all encodings, then each encoding's methods (drawn by the one
    plotting module of curves by length, posexp.results.curves)."""
    columns = [c for c in columns if _points(c, protocol)]  # the rest: unplotted(), in words
    plain = [c for c in columns if c.method == baseline_method()]
    panels = []
    for bases, methods, title in _layout(columns, protocol):
        curves = []
        for base in bases:
            if methods:  # a PE's own panel: its plain line is "no extension"
                name = "no extension" + (f" [{base.series}]" if base.series else "")
                style = method_style(baseline_method())
            else:
                name, style = base.label, column_style(base)
            # a fine-tune keeps its PE's colour, dashed: one encoding, other weights
            dash = "--" if base.tuned_at and not methods else _style(base, plain)
            curves.append(curve_of(base, protocol, name, style, dash, band=True))
        for c in methods:
            style = spec_style(c.method, method_name(c))
            name = c.method + (f" [{c.series}]" if c.series else "")
            curves.append(curve_of(c, protocol, name, style, style.dash, band=False))
        panels.append(Panel(title, curves))
    tuned = sorted({c.tuned_at for c in columns if c.tuned_at and c.tuned_at != l0})
    marks = ([(l0, ":")] if l0 else []) + [(n, "-.") for n in tuned]
    several = any(r.get("n", 1) > 1 for c in columns for r in c.records.values())
    title = (
        f"Test perplexity against evaluation length ({protocol} windows)"
        + (f"; dotted: training length {l0:,}" if l0 else "")
        + (f"; dash-dot: fine-tuned at {' and '.join(f'{n:,}' for n in tuned)}" if tuned else "")
        + ("\nlines: seed mean; bands: ± one seed std around each plain line" if several else "")
    )
    shown = repr((panels, title, marks))  # Panel and Curve are dataclasses: their values
    return ctx.figure(
        f"report_extrapolation_{protocol}.png",
        shown,
        lambda: plot_panels(panels, title, "test perplexity (log scale)", marks),
    )
