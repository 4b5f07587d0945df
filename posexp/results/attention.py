"""Figures of where attention goes: one run's statistics at one length (mass by query–key
distance, entropy and first-token share against query position, one panel per layer, one line
per head and their mean), and a sweep's per-layer numbers with one colour per PE (the report).

The rows are those ``posexp.model.attention_stats.AttentionStats.rows`` gives (or read back from
its CSV); buckets sit at even steps on the x axis under their range labels (0, 1, 2–3, 4–7, …).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from posexp.results.figures import figure_title, panel_title
from posexp.results.style import Style, pe_style
from posexp.results.verdict import mean_std

HEAD_MEAN = "#000000"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panels(n: int, per_row: int = 4, sharey: bool = True) -> tuple[Any, list[Any]]:
    plt = _pyplot()
    cols = min(max(1, n), per_row)
    rows = -(-max(1, n) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(4.0 * cols + 0.4, 3.9 * rows + 1.2),
        sharey=sharey,
        squeeze=False,
        layout="constrained",
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat


def _bucket_axis(ax: Any, labels: Sequence[str], xlabel: str) -> None:
    ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 6 else 0, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.grid(True, alpha=0.3)


def plot_by_bucket(
    rows: Sequence[Mapping[str, Any]],
    value: str,
    ylabel: str,
    xlabel: str,
    title: str,
    reference: str | None = None,
    reference_label: str = "",
    ylim: tuple[float, float] | None = None,
    log_y: bool = False,
    train_length: int | None = None,
) -> Any:
    """One panel per layer: ``value`` against the bucket, a thin line per head, the heads'
    mean in black; ``reference``: a column drawn as a grey dashed line (the same in every
    head), labelled ``reference_label``; ``log_y``: a log scale (a zero drawn at the bottom);
    ``train_length``: a dotted line where the values past the training length begin."""
    import matplotlib

    layers = sorted({int(r["layer"]) for r in rows})
    heads = sorted({int(r["head"]) for r in rows})
    cmap = matplotlib.colormaps["viridis"]
    fig, axes = _panels(len(layers))
    for ax, layer in zip(axes, layers, strict=False):
        mine = [r for r in rows if int(r["layer"]) == layer]
        buckets = sorted({int(r["bucket"]) for r in mine})
        labels = [next(str(r["label"]) for r in mine if int(r["bucket"]) == b) for b in buckets]
        per_head = {
            h: [
                float(next(r[value] for r in mine if int(r["head"]) == h and int(r["bucket"]) == b))
                for b in buckets
            ]
            for h in heads
        }
        for h, ys in per_head.items():
            shade = cmap(0.15 + 0.7 * h / max(1, len(heads) - 1))
            ax.plot(
                range(len(buckets)), ys, "-", color=shade, linewidth=1, alpha=0.8, label=f"head {h}"
            )
        mean = [sum(per_head[h][i] for h in heads) / len(heads) for i in range(len(buckets))]
        ax.plot(
            range(len(buckets)),
            mean,
            "-o",
            color=HEAD_MEAN,
            linewidth=2,
            markersize=4,
            label="mean of heads",
        )
        if reference is not None:
            ref = [
                float(next(r[reference] for r in mine if int(r["bucket"]) == b)) for b in buckets
            ]
            ax.plot(
                range(len(buckets)), ref, "--", color="grey", linewidth=1.2, label=reference_label
            )
        edges = [
            next((int(r["low"]), int(r["high"])) for r in mine if int(r["bucket"]) == b)
            for b in buckets
        ]
        if train_length is not None and train_length <= edges[-1][1]:
            # Between buckets when L0 opens one (a power of two), else inside its bucket.
            at = next(i for i, (_, hi) in enumerate(edges) if hi >= train_length)
            x = at - 0.5 if edges[at][0] == train_length else at
            ax.axvline(
                x, color="grey", linestyle=":", linewidth=1.2, label=f"L0 = {train_length:,}"
            )
        if log_y:
            ax.set_yscale("log", nonpositive="clip")
        if ylim is not None:
            ax.set_ylim(*ylim)
        _bucket_axis(ax, labels, xlabel)
        panel_title(ax, f"layer {layer}")
    axes[0].set_ylabel(ylabel)
    # One legend for every panel, under them all: the heads and the lines are the same in each.
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncols=len(labels) if len(labels) <= 6 else -(-len(labels) // 2),
        fontsize=8,
        frameon=False,
    )
    figure_title(fig, title)
    return fig


def plot_distance(
    rows: Sequence[Mapping[str, Any]], title: str, train_length: int | None = None
) -> Any:
    """Attention mass by query–key distance bucket, averaged over the queries that reach it."""
    return plot_by_bucket(
        rows,
        "mass_reachable",
        "attention mass (mean over queries that reach the bucket)",
        "query–key distance (tokens, log buckets)",
        title,
        ylim=(-0.02, 1.02),
        train_length=train_length,
    )


def plot_entropy(
    rows: Sequence[Mapping[str, Any]], title: str, train_length: int | None = None
) -> Any:
    """Attention entropy (nats) against query position, with uniform attention's as reference."""
    return plot_by_bucket(
        rows,
        "entropy",
        "attention entropy (nats)",
        "query position (tokens, log buckets)",
        title,
        reference="uniform",
        reference_label="uniform over every key seen: log(i+1)",
        train_length=train_length,
    )


def plot_sink(
    rows: Sequence[Mapping[str, Any]], title: str, train_length: int | None = None
) -> Any:
    """The share of attention on the window's first token against query position, on a log
    scale: a share that stays far above 1/(i+1) at late queries (a sink) shows."""
    # Down to a third of the smallest share drawn (a zero sits at the bottom), 1e-6 at least.
    shown = [float(r[k]) for r in rows for k in ("sink_share", "uniform") if float(r[k]) > 0]
    floor = max(1e-6, min(shown, default=1e-4) / 3)
    return plot_by_bucket(
        rows,
        "sink_share",
        "share of attention on the first token",
        "query position (tokens, log buckets)",
        title,
        reference="uniform",
        reference_label="uniform over every key seen: 1/(i+1)",
        ylim=(floor, 1.5),
        log_y=True,
        train_length=train_length,
    )


LOG_FLOOR = 1e-6  # the lowest share a log panel shows


def plot_layers_by_pe(
    panels: Sequence[tuple[str, str, Mapping[str, tuple[str, Mapping[int, Sequence[float]]]]]],
    title: str,
    log_y: Sequence[bool] = (),
) -> Any:
    """Panels of a number against the layer, one line per row of the sweep in its PE's
    registered colour: the mean over seeds with a band from the smallest to the largest seed.
    ``panels``: (title, y label, {row label: (pe name, {layer: per-seed values})}); a row's
    legend entry says its seed count. ``log_y[i]``: panel i on a log y axis of its own (shares
    of attention far below the others' scale)."""
    fig, axes = _panels(len(panels), per_row=len(panels), sharey=not any(log_y))
    for ax, (name, ylabel, rows) in zip(axes, panels, strict=False):
        for label, (pe, by_layer) in rows.items():
            style = pe if isinstance(pe, Style) else pe_style(pe)
            layers = sorted(by_layer)
            means = [mean_std(list(by_layer[n]))[0] for n in layers]
            seeds = min(len(by_layer[n]) for n in layers)
            ax.plot(
                layers,
                means,
                "-",
                marker=style.marker,
                color=style.color,
                label=f"{label} (n = {seeds})",
            )
            if seeds > 1:
                ax.fill_between(
                    layers,
                    [min(by_layer[n]) for n in layers],
                    [max(by_layer[n]) for n in layers],
                    color=style.color,
                    alpha=0.15,
                    linewidth=0,
                )
        ax.set_xlabel("layer")
        if len(log_y) > axes.index(ax) and log_y[axes.index(ax)]:
            # Shares far below a millionth (FoX, stick-breaking: 1e-40) would stretch the axis
            # over dozens of decades; they sit on its floor instead.
            ax.set_yscale("log")
            ax.set_ylim(bottom=LOG_FLOOR)
            ylabel = f"{ylabel} (floor {LOG_FLOOR:g})"
        ax.set_ylabel(ylabel)
        ax.set_xticks(sorted({n for _, by_layer in rows.values() for n in by_layer}))
        ax.grid(True, alpha=0.3)
        panel_title(ax, name)
    legend: dict[str, Any] = {}  # every row once, in the order first drawn
    for ax in axes[: len(panels)]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="outside lower center",
        ncols=min(len(legend), 4),
        fontsize=8,
        frameon=False,
    )
    figure_title(fig, title)
    return fig
