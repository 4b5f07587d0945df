"""Depth × length heat maps shared by the report's retrieval views (passkey, RULER)."""

from __future__ import annotations

import math
from pathlib import Path

from posexp.commands.report.stats import mean_std
from posexp.commands.report.view import ReportContext
from posexp.results.figures import figure_title, panel_title

# panel title -> (depth, size) -> seed -> value in [0, 1]
Panels = dict[str, dict[tuple[float, int], dict[int, float]]]


def depth_maps(
    ctx: ReportContext,
    panels: Panels,
    context: dict[int, int],
    l0: int,
    labels: tuple[str, str, str],
    name: str,
) -> Path:
    """One heat map per panel, depths down and lengths (as multiples of ``l0``) across, each cell
    its seed mean written in it; ``labels`` = (y axis, colour bar, title); saved as ``name``.
    Every panel has a column for each size of ``context`` (size -> tokens), ``–`` where it has
    no score, so all maps of a report line up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ylabel, bar, title = labels
    cols = min(4, len(panels))
    grid = -(-len(panels) // cols)
    fig, axes = plt.subplots(
        grid,
        cols,
        figsize=(3.6 * cols + 1.2, 3.0 * grid + 0.9),
        squeeze=False,
        layout="constrained",
    )
    image = None
    # The report's sizes, not the panel's: a length a method was never scored at is a column of
    # –, where leaving it out would shift the columns against the other maps.
    sizes = sorted(context)
    for ax, (panel, cells) in zip(axes.flat, panels.items(), strict=False):
        depths = sorted({d for d, _ in cells})
        values = [
            [mean_std(list(cells.get((d, s), {}).values()))[0] for s in sizes] for d in depths
        ]
        image = ax.imshow(values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for i, line in enumerate(values):
            for j, v in enumerate(line):
                # A cell no seed was scored at is left blank and marked as the tables mark it.
                text = "–" if math.isnan(v) else f"{v:.2f}"
                color = "white" if v < 0.6 else "black"  # NaN: black, on the blank cell
                ax.text(j, i, text, ha="center", va="center", fontsize=8, color=color)
        ax.set_xticks(range(len(sizes)), [f"{context[s] / l0:.3g}×" for s in sizes])
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths])
        ax.set_xlabel(f"context (× L0 = {l0})")
        ax.set_ylabel(ylabel)
        panel_title(ax, panel)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label=bar)
    # Wrapped to the figure: one map is narrower than the report's long title.
    figure_title(fig, title)
    return ctx.save_figure(fig, name)
