"""The one plotting module for curves by length: a run's figures (`posexp eval-extrapolate`)
and the report's draw their lines, ticks, gaps and legends here, each curve in the style the
registry (``posexp.results.style``) gives its PE or method spec, at most ``MOST_CURVES`` a panel;
the report's curves over positions in a document (context use) are drawn by ``plot_panels``
too, with positions on the log x axis."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from posexp.results.depths import panel
from posexp.results.figures import panel_title
from posexp.results.style import DASHES, MARKERS, Style, method_style
from posexp.results.verdict import mean_std
from posexp.scoring import SCORERS, metric_of

__all__ = [
    "DASHES",
    "MARKERS",
    "MOST_CURVES",
    "Curve",
    "Guide",
    "Panel",
    "bucket_bands",
    "bucket_curve",
    "method_panels",
    "plot_panels",
    "plot_scores",
]
MOST_CURVES = 8  # a panel with more lines than this cannot be read: more panels instead
PANELS_PER_ROW = 3  # accuracy plots: panels (key depths) per row


def decimals_needed(value: float, most: int = 4) -> int:
    """The fewest decimals (at most ``most``) that write ``value`` without rounding it."""
    for k in range(most + 1):
        if abs(round(value, k) - value) <= 1e-9 * max(1.0, abs(value)):
            return k
    return most


def same_decimals_formatter() -> Any:
    """A tick formatter that writes every tick of an axis with the same number of decimals
    (5.00, 5.02, 5.04 rather than 5, 5.02, 5.04)."""
    from matplotlib.ticker import Formatter

    class SameDecimals(Formatter):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return f"{x:,.{decimals_needed(x)}f}"

        def format_ticks(self, values: Any) -> list[str]:
            digits = max((decimals_needed(v) for v in values), default=0)
            return [f"{v:,.{digits}f}" for v in values]

    return SameDecimals()


NARROW_SPAN = 3.0  # a y range narrower than this factor gets evenly spaced ticks


def plain_log_axes(ax: Any, lengths: list[int], log_y: bool = True) -> None:
    """Log axes with the lengths themselves as x ticks and plain numbers on y (call it after
    plotting: the y ticks follow the range plotted); ``log_y`` False keeps y linear (a loss
    in nats, a gain that may fall below 0)."""
    from matplotlib.ticker import (
        FixedLocator,
        LogLocator,
        MaxNLocator,
        NullFormatter,
        NullLocator,
    )

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lengths))
    ax.xaxis.set_minor_locator(NullLocator())
    # Beyond eight ticks the labels of neighbouring doublings meet ("5121,024"): slanted.
    ax.set_xticklabels(
        [f"{n:,}" for n in lengths],
        rotation=45 if len(lengths) > 8 else 0,
        ha="right" if len(lengths) > 8 else "center",
    )
    if not log_y:
        ax.yaxis.set_major_formatter(same_decimals_formatter())
        return
    ax.set_yscale("log")
    # What is plotted already: numpy floats, (inf, -inf) for a panel with no finite value (every
    # cell past a learned table), whose ratio is inf / inf (numpy's "invalid value" warning).
    low, high = (float(v) for v in ax.dataLim.intervaly)
    if math.isfinite(low) and math.isfinite(high) and 0 < low and high / low < NARROW_SPAN:
        # A narrow range (ppl 11.5-20): a log locator would label only 15 and 20, so the ticks
        # are evenly spaced numbers inside it instead, several of them.
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    else:
        ax.yaxis.set_major_locator(
            LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0), numticks=12)
        )
    ax.yaxis.set_major_formatter(same_decimals_formatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


# Below this relative spread a fitted y axis turns a change of a fraction of a percent into what
# looks like a steep fall: the axis label then says how small the spread is.
ZOOM_NOTE_BELOW = 0.02


def zoom_note(values: list[float]) -> str:
    """`` (values span only 0.3%)`` when the plotted values differ by under ZOOM_NOTE_BELOW."""
    finite = [v for v in values if v is not None and v == v and v > 0]
    if len(finite) < 2:
        return ""
    spread = max(finite) / min(finite) - 1
    return f" (values span only {spread:.1%})" if spread < ZOOM_NOTE_BELOW else ""


def gapped(
    values: dict[int, float], lengths: list[int]
) -> tuple[list[int], list[float], list[int]]:
    """``values`` over ``lengths`` and its own lengths, NaN where it has none, and the lengths of
    ``lengths`` it lacks: matplotlib breaks a line at NaN, where a plain line would join its
    neighbours as though the lengths between them had been scored."""
    xs = sorted({*lengths, *values})
    return xs, [values.get(n, math.nan) for n in xs], [n for n in lengths if n not in values]


def not_scored(lacks: list[int]) -> str:
    """A line's legend note on the lengths it lacks: `` (not scored at 512, 2,048)``, or ""."""
    return f" (not scored at {', '.join(f'{n:,}' for n in lacks)})" if lacks else ""


def gaps_note(lacks: dict[str, list[int]]) -> str:
    """The note of one legend entry for the lines of every panel (``lacks``: panel -> lengths
    the line lacks there): the lengths alone where they are the same in every panel, else the
    panels that lack each set (``128, 482 in copy, reverse; 482 in sort``)."""
    panels: dict[tuple[int, ...], list[str]] = {}
    for panel_name, ns in lacks.items():
        panels.setdefault(tuple(ns), []).append(panel_name)
    if len(panels) == 1:
        return not_scored(list(next(iter(panels))))
    each = "; ".join(
        f"{', '.join(f'{n:,}' for n in ns)} in {', '.join(names)}"
        for ns, names in panels.items()
        if ns
    )
    return f" (not scored at {each})"


def spec_style(label: str, name: str) -> Style:
    """The registry's style of the spec of method ``name`` shown as ``label``."""
    return method_style(name, label)


def names_of(records: list[dict[str, Any]]) -> dict[str, str]:
    """Each spec label of ``records`` -> its method's name (the record's ``name``)."""
    return {r["method"]: r.get("name") or r["method"] for r in records}


def method_panels(
    methods: list[str], names: Mapping[str, str], most: int = MOST_CURVES
) -> list[list[str]]:
    """``methods`` (spec labels; ``names``: label -> method name) in panels of at most ``most``
    curves, grouped by method: no extension in every panel, then whole methods while they fit;
    a method with more specs than a panel holds fills panels of its own."""
    from posexp.extension import baseline_method

    plain = [m for m in methods if names.get(m, m) == baseline_method()]
    groups: dict[str, list[str]] = {}
    for m in methods:
        if m not in plain:
            groups.setdefault(names.get(m, m), []).append(m)
    room = max(1, most - len(plain))
    panels: list[list[str]] = []
    for group in groups.values():
        for start in range(0, len(group), room):
            chunk = group[start : start + room]
            if panels and len(panels[-1]) + len(chunk) <= room:
                panels[-1] += chunk
            else:
                panels.append(chunk)
    return [plain + panel for panel in panels] or [plain]


def method_lines(
    ax: Any, records: list[dict[str, Any]], methods: list[str], metric: str
) -> dict[str, tuple[Any, list[int]]]:
    """One line per method of ``metric`` against length, each in its registry style (the same
    in every panel and file); a line breaks at a length another method has and it lacks (NaN),
    and its label names them. Returns method -> (line, lengths lacked)."""
    scored = [r for r in records if r.get(metric) is not None]
    lengths = sorted({r["length"] for r in scored})
    names = names_of(records)
    drawn = {}
    for method in methods:
        value = {r["length"]: r[metric] for r in scored if r["method"] == method}
        if value:
            style = spec_style(method, names.get(method, method))
            xs, ys, lacks = gapped(value, lengths)
            (line,) = ax.plot(
                xs,
                ys,
                marker=style.marker,
                linestyle=style.dash,
                markersize=6,
                color=style.color,
                label=method + not_scored(lacks),
            )
            drawn[method] = (line, lacks)
    return drawn


def shared_legend(fig: Any, drawn: dict[str, dict[str, tuple[Any, list[int]]]], ax: Any) -> None:
    """One legend beside the panels for every method drawn in any of them (``drawn``: panel ->
    ``method_lines``' answer), its gaps named per panel where they differ; then ``ax``'s other
    entries (the training length)."""
    lines: dict[str, Any] = {}
    lacks: dict[str, dict[str, list[int]]] = {}
    for panel_name, methods in drawn.items():
        for method, (line, missing) in methods.items():
            lines.setdefault(method, line)
            lacks.setdefault(method, {})[panel_name] = missing
    handles = list(lines.values())
    labels = [method + gaps_note(lacks[method]) for method in lines]
    ours = {id(line) for methods in drawn.values() for line, _ in methods.values()}
    for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
        if id(handle) not in ours:
            handles.append(handle)
            labels.append(label)
    fig.legend(handles, labels, loc="outside right center", fontsize=8)


def plot_ppl(
    records: list[dict[str, Any]], train_length: int, title: str, metric: str = "ppl"
) -> Any:
    """A log-scale metric (perplexity) against length (log-log, plain ticks), one line per
    method, one panel per protocol."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    protocols = list(dict.fromkeys(r["protocol"] for r in records))
    protocols.sort(key=lambda p: SCORERS.names().index(p) if p in SCORERS else len(SCORERS))
    methods = list(dict.fromkeys(r["method"] for r in records))
    names = names_of(records)
    groups = method_panels(methods, names)
    fig, axes = plt.subplots(
        len(protocols),
        len(groups),
        figsize=(6 * len(groups) + 2.2, 4.8 * len(protocols)),
        squeeze=False,
        layout="constrained",
        sharey="row",
    )
    lengths = sorted({r["length"] for r in records})
    drawn = {}
    for row, protocol in zip(axes, protocols, strict=True):
        for ax, group in zip(row, groups, strict=True):
            mine = [r for r in records if r["protocol"] == protocol]
            name = protocol if len(groups) == 1 else f"{protocol}: {', '.join(group)}"
            drawn[name] = method_lines(ax, mine, group, metric)
            ax.axvline(
                train_length,
                color="grey",
                linestyle=":",
                linewidth=1,
                label=f"training length ({train_length:,})",
            )
            plain_log_axes(ax, lengths)
            ax.set_xlabel("evaluation length (tokens)")
            shown = [r.get(metric) for r in mine if r["method"] in group]
            label = metric_of(protocol).label
            ax.set_ylabel(f"{label} (log scale)" + zoom_note(shown))
            methods_named = list(dict.fromkeys(names[m] for m in group if names[m] != "none"))
            what = f"; {', '.join(methods_named)}" if len(groups) > 1 else ""
            panel_title(ax, f"{label}, {protocol} windows{what}")
            ax.grid(True, which="major", alpha=0.3)
    shared_legend(fig, drawn, axes[0][0])
    fig.suptitle(title, fontsize=10)
    return fig


def plot_accuracy(
    records: list[dict[str, Any]],
    train_sizes: tuple[int, int],
    unit: str,
    title: str,
    metric: str = "accuracy",
) -> Any:
    """A metric in [0, 1] (exact-match accuracy) against size, one line per method, one panel
    per key depth (or protocol); the training sizes shaded (a line at one training length)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(panel(r) for r in records))
    # At most three panels a row: a --depths sweep of six stays readable as two rows of three.
    cols = min(len(panels), PANELS_PER_ROW)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(5.5 * cols + 2.2, 4.6 * rows),
        squeeze=False,
        layout="constrained",
        sharey=True,
    )
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    lengths = sorted({r["length"] for r in records})
    methods = list(dict.fromkeys(r["method"] for r in records))  # one style each, every panel
    drawn = {}
    for ax, name in zip(axes.flat, panels, strict=False):
        drawn[name] = method_lines(ax, [r for r in records if panel(r) == name], methods, metric)
        if train_sizes[0] == train_sizes[1]:
            ax.axvline(
                train_sizes[0],
                color="grey",
                linestyle=":",
                linewidth=1,
                label=f"training length ({train_sizes[0]:,})",
            )
        else:
            ax.axvspan(
                train_sizes[0],
                train_sizes[1],
                color="grey",
                alpha=0.12,
                label=f"training sizes ({train_sizes[0]}–{train_sizes[1]})",
            )
        ax.set_xticks(lengths, [f"{n:,}" for n in lengths], rotation=45 if len(lengths) > 8 else 0)
        mine = [r.get(metric) for r in records if panel(r) == name and r.get(metric) is not None]
        if all(0 <= v <= 1 for v in mine):  # a share; a gain in nats may leave [0, 1]
            ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel(f"test size ({unit})")
        label = metric_of(next(r["protocol"] for r in records if panel(r) == name)).label
        ax.set_ylabel(label)
        panel_title(ax, f"{label}, {name}")
        ax.grid(True, alpha=0.3)
    shared_legend(fig, drawn, axes[0][0])
    fig.suptitle(title, fontsize=10)
    return fig


@dataclass
class Curve:
    """One line of a panel: its label, its value at each length, its style, and the seeds'
    spread (low, high) at each length where a band is drawn."""

    label: str
    points: dict[int, float]
    style: Style
    dash: Any
    band: dict[int, tuple[float, float]] = field(default_factory=dict)
    errors: dict[int, float] = field(default_factory=dict)  # the seeds' std, drawn as bars
    note: str = ""  # said after the label in a shared legend (after the lengths it lacks)


@dataclass
class Panel:
    """A panel of curves (at most MOST_CURVES), under its title."""

    title: str
    curves: list[Curve]
    xlabel: str = ""  # its own x label, where panels measure size in different units


def plot_panels(
    panels: list[Panel],
    title: str,
    ylabel: str,
    marks: list[tuple[int, str]] = (),
    per_row: int = 4,
    xlabel: str = "evaluation length (tokens)",
    log_y: bool = True,
    zero_line: bool = False,
    share_y: bool = True,
) -> Any:
    """Panels of curves against length (log-log, plain ticks), a shared y axis, at most
    ``per_row`` a row; a line breaks at a length of its panel it lacks, and its label names
    them; ``marks``: (length, dash) of the grey vertical lines (the training lengths). The
    x axis may be another count on a log scale (``xlabel``: positions in a document), the y
    axis linear (``log_y`` False), with a line at 0 (``zero_line``: a gain), each panel its
    own y range (``share_y`` False: a panel zoomed on part of the x range)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.results.figures import figure_title, legend_below

    count = max(1, len(panels))
    cols = min(count, per_row)
    rows = -(-count // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(4.2 * cols + (2.5 if count == 1 else 0), 4.6 * rows + 0.6),
        sharey=share_y,
        squeeze=False,
        layout="constrained",
    )
    flat = list(axes.flat)
    lengths = sorted({n for p in panels for c in p.curves for n in c.points})
    for ax, panel_ in zip(flat, panels, strict=False):
        mine = sorted({n for c in panel_.curves for n in c.points})
        for c in panel_.curves:
            xs, ys, lacks = gapped(c.points, mine)
            ax.plot(
                xs,
                ys,
                c.dash,
                marker=c.style.marker,
                markersize=5,
                color=c.style.color,
                label=c.label + not_scored(lacks),
            )
            if c.band:
                # NaN at the lengths the curve lacks: the band breaks where the line does
                gap = (math.nan, math.nan)
                spread = sorted({*mine, *c.band})
                lo, hi = zip(*(c.band.get(n, gap) for n in spread), strict=True)
                ax.fill_between(spread, lo, hi, color=c.style.color, alpha=0.15, linewidth=0)
        panel_title(ax, panel_.title)
        for n, dash in marks:
            ax.axvline(n, color="grey", linestyle=dash, linewidth=1)
        if zero_line:
            ax.axhline(0, color="grey", linewidth=0.8)
        if lengths:
            plain_log_axes(ax, lengths, log_y)
        ax.grid(True, which="major", alpha=0.3)
        ax.set_xlabel(xlabel)
        legend_below(ax, columns=2 if len(ax.get_legend_handles_labels()[0]) > 4 else 1)
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    for row in axes:
        for ax in row if not share_y else row[:1]:
            ax.set_ylabel(ylabel)
    figure_title(fig, title)
    return fig


# ---- curves over position buckets (context use) --------------------------------------------


def bucket_bands(per_seed: Sequence[Sequence[float | None]]) -> list[tuple[float, float, int]]:
    """Per bucket, (mean, sample std, n) over the seeds that measured it (nan, nan, 0 for
    none): the curves of one series, averaged over its seeds."""
    width = max((len(c) for c in per_seed), default=0)
    out = []
    for i in range(width):
        values = [
            float(c[i])
            for c in per_seed
            if i < len(c) and isinstance(c[i], (int, float)) and math.isfinite(c[i])
        ]
        out.append((*mean_std(values), len(values)))
    return out


def bucket_curve(
    label: str, edges: Sequence[int], per_seed: Sequence[Sequence[float | None]], style: Style
) -> Curve:
    """A curve over position buckets (each at its end: the most tokens of context in it) of the
    seeds' mean, a band of one seed std either side where two or more seeds measured a bucket."""
    ends = list(edges[1:])
    bands = bucket_bands(per_seed)
    points = {e: m for e, (m, _, n) in zip(ends, bands, strict=False) if n}
    spread = {e: (m - s, m + s) for e, (m, s, n) in zip(ends, bands, strict=False) if n > 1}
    return Curve(label, points, style, style.dash, spread)


def plot_buckets(
    panels: list[Panel],
    title: str,
    ylabel: str,
    l0s: Sequence[int],
    gain: bool = False,
    share_y: bool = True,
) -> Any:
    """Curves over position buckets in a document (log x, linear y; dotted: each L0; a line at
    0 for a gain; ``share_y`` False: each panel its own y range)."""
    return plot_panels(
        panels,
        title,
        ylabel,
        marks=[(n, ":") for n in l0s],
        xlabel="position in document (bucket end; dotted: L0)",
        log_y=False,
        zero_line=gain,
        share_y=share_y,
    )


def from_position(curve: Curve, start: int) -> Curve:
    """``curve`` with only its buckets ending past ``start`` (a panel zoomed on the far
    positions, where the first tokens' high loss would flatten the rest)."""
    return dataclasses.replace(
        curve,
        points={x: y for x, y in curve.points.items() if x > start},
        band={x: b for x, b in curve.band.items() if x > start},
    )


# The curve each context-use protocol draws: its per-bucket field and what that field is.
CONTEXT_CURVES = {
    "doc_position": ("position_loss", "loss (nats/token)"),
    "context_gain": ("position_gain", "gain from the context past L0 (nats/token)"),
}


def plot_run_buckets(records: list[dict[str, Any]], protocol: str, l0: int, title: str) -> Any:
    """One run's curves of a context-use ``protocol`` at the longest length it scored: one
    line per method spec in the registry's style, at most ``MOST_CURVES`` a panel; None when
    no record of it holds a curve."""
    name, quantity = CONTEXT_CURVES[protocol]
    mine = [r for r in records if r["protocol"] == protocol and r.get(name)]
    if not mine:
        return None
    longest = max(r["length"] for r in mine)
    at = {r["method"]: r for r in mine if r["length"] == longest}
    names = names_of(list(at.values()))
    panels = [
        Panel(
            f"{quantity} at length {longest:,}",
            [
                bucket_curve(m, at[m]["position_edges"], [at[m][name]], spec_style(m, names[m]))
                for m in group
            ],
        )
        for group in method_panels(list(at), names)
    ]
    return plot_buckets(
        panels, f"{protocol}: {title}", quantity, [l0], gain=protocol == "context_gain"
    )


@dataclass(frozen=True)
class Guide:
    """A reference drawn across every panel and named in the legend: a vertical line at
    ``at[0]`` (``kind`` "x"), a horizontal one (``"y"``), or a shaded span of x (``"span"``,
    ``at`` its two ends)."""

    kind: str
    at: tuple[float, ...]
    label: str
    dash: str = "--"


def plot_scores(
    panels: list[Panel],
    title: str,
    ylabel: str,
    xlabel: str,
    guides: list[Guide] = (),
    log_x: bool = False,
    width: float = 4.6,
    order: list[str] | None = None,
    per_row: int | None = None,
) -> Any:
    """Scores in [0, 1] (accuracy, a task score) against size or length: panels in one row
    sharing y, x ticks at the sizes measured (log base 2 where ``log_x``, plain numbers), a line
    broken where it lacks a size, the seeds' std as error bars, ``guides`` (training sizes,
    a threshold) on every panel; one legend beside the panels, an entry per curve label that
    names the sizes its lines lack (in which panel, where they differ), in ``order`` (curve
    labels) where given, else as the panels first hold them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.results.figures import figure_title

    count = max(1, len(panels))
    cols = min(count, per_row or count)  # a mixture's eight tasks: two rows of four, not one
    rows = -(-count // cols)
    labels = list(dict.fromkeys([*(order or []), *(c.label for p in panels for c in p.curves)]))
    height = max(4.2, 0.27 * (len(labels) + len(guides)) + 1.2)  # the legend fits beside
    fig, grid = plt.subplots(
        rows,
        cols,
        figsize=(width * cols + 2.4, max(height, 4.2 * rows)),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for ax in grid.flat[count:]:
        ax.set_visible(False)
    axes = [list(grid.flat)]  # panels in reading order
    handles: dict[str, Any] = {}
    lacks: dict[str, dict[str, list[int]]] = {}  # curve label -> panel -> sizes it lacks
    notes: dict[str, str] = {}
    guide_handles: dict[str, Any] = {}
    for ax, panel_ in zip(axes[0], panels, strict=False):
        sizes = sorted({n for c in panel_.curves for n in c.points})
        for c in panel_.curves:
            if not c.points:  # measured at no size (the table says why): no line
                continue
            xs, ys, missing = gapped(c.points, sizes)
            look = {
                "marker": c.style.marker,
                "color": c.style.color,
                "linestyle": c.dash,
                "label": c.label + not_scored(missing) + c.note,  # this panel's own gaps
            }
            if c.errors:
                errors = [c.errors.get(n, math.nan) for n in xs]
                drawn = ax.errorbar(xs, ys, yerr=errors, capsize=3, **look)
            else:
                (drawn,) = ax.plot(xs, ys, **look)
            handles.setdefault(c.label, drawn)
            lacks.setdefault(c.label, {})[panel_.title] = missing
            notes.setdefault(c.label, c.note)
        for g in guides:
            if g.kind == "span":
                made = ax.axvspan(g.at[0], g.at[1], color="grey", alpha=0.12)
            elif g.kind == "y":
                made = ax.axhline(g.at[0], color="grey", linestyle=g.dash, linewidth=1)
            else:
                made = ax.axvline(g.at[0], color="grey", linestyle=g.dash, linewidth=1)
            guide_handles.setdefault(g.label, made)
        if log_x:
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
        if sizes:
            ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.set_ylim(-0.03, 1.03)
        if len(panels) > 1 or panel_.title:
            ax.set_title(panel_.title, fontsize=11 if len(panels) > 1 else 10)
        ax.set_xlabel(panel_.xlabel or xlabel)
        ax.grid(True, alpha=0.3)
    for row in grid:
        row[0].set_ylabel(ylabel)
    shown = [label for label in labels if label in handles]
    texts = [
        label
        + (gaps_note(lacks[label]) if len(panels) > 1 else not_scored(*lacks[label].values()))
        + notes[label]
        for label in shown
    ]
    fig.legend(
        [handles[label] for label in shown] + list(guide_handles.values()),
        texts + list(guide_handles),
        loc="outside right center",
        fontsize=9 if len(panels) > 1 else 8,
    )
    figure_title(fig, title)
    return fig
