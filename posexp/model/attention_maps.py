"""Figures of attention weights: one heat map per head, readable at any head count."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def attention_figure(weights: np.ndarray, labels: list[str], title: str) -> Any:
    """A grid of heatmaps, one per head, on a square-root colour scale from 0 to 1.

    A row of weights sums to 1 over up to T keys, so most weights are near 1/T: a linear scale
    shows them all as dark. The square-root scale spreads them out while 0 and 1 stay fixed,
    so heads and layers remain comparable. Tokens label the outer axes when they fit; thin
    white lines mark the ``<sep>`` token, between source (left/top) and target.
    """
    from matplotlib.colors import PowerNorm
    from matplotlib.figure import Figure

    heads, T = weights.shape[0], weights.shape[-1]
    cols = min(heads, 4)
    rows = math.ceil(heads / cols)
    show_tokens = T <= 48
    cell = 4.2 if show_tokens else 2.6
    margin = 1.1 if show_tokens else 0.3
    width, height = cell * cols + margin + 1.3, cell * rows + margin + 0.8
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(rows, cols, squeeze=False)
    norm = PowerNorm(gamma=0.5, vmin=0.0, vmax=1.0)
    image = None
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[h], norm=norm, cmap="viridis", interpolation="nearest")
        ax.set_title(f"head {h}", fontsize=10)
        if "<sep>" in labels:
            sep = labels.index("<sep>")
            ax.axvline(sep, color="white", linewidth=0.5)
            ax.axhline(sep, color="white", linewidth=0.5)
        last_row = h // cols == rows - 1 or h + cols >= heads
        if show_tokens and last_row:
            ax.set_xticks(range(T), labels, rotation=90, fontsize=7)
        else:
            ax.set_xticks([])
        if show_tokens and h % cols == 0:
            ax.set_yticks(range(T), labels, fontsize=7)
        else:
            ax.set_yticks([])
    # A fixed layout: constrained layout costs seconds per figure with token tick labels.
    fig.subplots_adjust(
        left=margin / width,
        right=1 - 1.3 / width,
        bottom=margin / height,
        top=1 - 0.7 / height,
        wspace=0.08,
        hspace=0.15 if not show_tokens else 0.12,
    )
    cax = fig.add_axes((1 - 1.05 / width, 0.2, 0.18 / width, 0.6))
    fig.colorbar(
        image,
        cax=cax,
        label="attention weight (square-root scale)",
        ticks=[0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0],
    )
    fig.suptitle(title, fontsize=11)
    return fig


def figure_to_array(fig: Any) -> np.ndarray:
    """Render a matplotlib Figure (no pyplot) to an RGB uint8 array."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
