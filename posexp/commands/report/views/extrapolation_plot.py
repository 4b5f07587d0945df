"""The extrapolation view's figure: test perplexity against length, as small multiples.

The first panel compares the encodings without extension; each encoding evaluated with
extension methods then gets a panel of its own (its plain line and one line per method), so no
panel holds more than one encoding's methods. A method keeps its colour in every panel, the
y axis is shared, and the seeds' spread is a band around each plain line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from posexp.commands.report.view import ReportContext
from posexp.commands.report.views.extrapolation_data import Column
from posexp.extension import baseline_method
from posexp.results.curves import gapped, not_scored
from posexp.results.figures import figure_title, legend_below, panel_title


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
    """The columns of each panel, as drawn: the plain ones, then one PE's plain and methods."""
    columns = [c for c in columns if _points(c, protocol)]
    plain = [c for c in columns if c.method == baseline_method()]
    panels = [plain]
    for jobs in {id(c.jobs): c.jobs for c in plain}.values():
        methods = [c for c in columns if c.jobs is jobs and c.method != baseline_method()]
        if methods:
            panels.append([c for c in plain if c.jobs is jobs] + methods)
    return panels


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


def _band(ax: Any, c: Column, protocol: str, color: Any, lengths: list[int]) -> None:
    spread = {
        n: (r["ppl"] - r["ppl_std"], r["ppl"] + r["ppl_std"])
        for (p, n), r in c.records.items()
        if p == protocol and r.get("ppl") is not None and r.get("n", 1) > 1
    }
    if spread:
        # NaN at the panel's lengths the column lacks: fill_between leaves a gap there, as the
        # line does, rather than a band across a length no seed was scored at.
        xs = sorted({*lengths, *spread})
        gap = (math.nan, math.nan)
        lo, hi = zip(*(spread.get(n, gap) for n in xs), strict=True)
        ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)


def extrapolation_plot(
    ctx: ReportContext, columns: list[Column], protocol: str, l0: int | None
) -> Path:
    """ppl against length (log-log, plain ticks): all encodings, then one panel per encoding's methods."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.commands.report.views.findings import pe_colors as pe_color_map
    from posexp.results.curves import MARKERS, plain_log_axes

    columns = [c for c in columns if _points(c, protocol)]  # the rest: unplotted(), in words
    plain = [c for c in columns if c.method == baseline_method()]
    # One panel per PE (its seeds' jobs), with every plain series of it: a PE scored on two
    # samples has two plain lines, told apart by their style.
    groups = list({id(c.jobs): c.jobs for c in plain}.values())
    with_methods = [
        (
            [c for c in plain if c.jobs is jobs],
            [c for c in columns if c.jobs is jobs and c.method != baseline_method()],
        )
        for jobs in groups
    ]
    with_methods = [(bases, methods) for bases, methods in with_methods if methods]
    method_names = list(dict.fromkeys(c.method for _, ms in with_methods for c in ms))
    panels = 1 + len(with_methods)
    cols = min(panels, 4)
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(4.2 * cols + (2.5 if panels == 1 else 0), 4.6 * rows + 0.6),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    flat = list(axes.flat)
    pe_colors = plt.get_cmap("tab10").colors
    # One colour per method across the panels (tab10 without C0, then tab20's light tones).
    method_colors = [*plt.get_cmap("tab10").colors[1:], *plt.get_cmap("tab20").colors[1::2]]
    lengths = sorted({n for c in columns for n, _ in _points(c, protocol)})

    def draw(ax: Any, c: Column, label: str, color: Any, marker: str, style: str) -> None:
        if not _points(c, protocol):
            return
        seeds = _seeds(c)
        xs, ys, lacks = gapped(dict(_points(c, protocol)), panel_lengths)
        ax.plot(
            xs,
            ys,
            style,
            marker=marker,
            markersize=5,
            color=color,
            label=label + (f" (n = {seeds})" if seeds > 1 else "") + not_scored(lacks),
        )

    ax = flat[0]
    same_in_every_figure = pe_color_map(ctx)
    panel_lengths = sorted({n for c in plain for n, _ in _points(c, protocol)})
    for i, c in enumerate(plain):
        color = same_in_every_figure.get(c.pe) or pe_colors[i % len(pe_colors)]
        draw(ax, c, c.label, color, MARKERS[i % len(MARKERS)], _style(c, plain))
        _band(ax, c, protocol, color, panel_lengths)
    panel_title(ax, "every encoding, no extension")
    for ax, (bases, methods) in zip(flat[1:], with_methods, strict=False):
        panel_lengths = sorted({n for c in bases + methods for n, _ in _points(c, protocol)})
        for base in bases:
            name = "no extension" + (f" [{base.series}]" if base.series else "")
            draw(ax, base, name, "black", "o", _style(base, bases))
            _band(ax, base, protocol, "black", panel_lengths)
        for c in methods:
            k = method_names.index(c.method)
            name = c.method + (f" [{c.series}]" if c.series else "")
            draw(ax, c, name, method_colors[k % len(method_colors)], MARKERS[k % 8], "--")
        pe_label = bases[0].label.removesuffix(f" [{bases[0].series}]")
        panel_title(ax, f"{pe_label} with extension methods")
    tuned = sorted({c.tuned_at for c in columns if c.tuned_at and c.tuned_at != l0})
    for ax in flat[:panels]:
        if l0:
            ax.axvline(l0, color="grey", linestyle=":", linewidth=1)
        for n in tuned:  # where a fine-tune's own training ends
            ax.axvline(n, color="grey", linestyle="-.", linewidth=1)
        if lengths:
            plain_log_axes(ax, lengths)
        ax.grid(True, which="major", alpha=0.3)
        ax.set_xlabel("evaluation length (tokens)")
        legend_below(ax, columns=2 if len(ax.get_legend_handles_labels()[0]) > 4 else 1)
    for ax in flat[panels:]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("test perplexity (log scale)")
    several = any(r.get("n", 1) > 1 for c in columns for r in c.records.values())
    figure_title(
        fig,
        f"Test perplexity against evaluation length ({protocol} windows)"
        + (f"; dotted: training length {l0:,}" if l0 else "")
        + (f"; dash-dot: fine-tuned at {' and '.join(f'{n:,}' for n in tuned)}" if tuned else "")
        + ("\nlines: seed mean; bands: ± one seed std around each plain line" if several else ""),
    )
    return ctx.save_figure(fig, f"report_extrapolation_{protocol}.png")
