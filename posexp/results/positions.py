"""The figure of loss by position in the window at one length (``eval-extrapolate``'s
``per_position.png``): a moving average per method, each in the style the registry gives it."""

from __future__ import annotations

from typing import Any

from posexp.results.curves import zoom_note
from posexp.results.style import method_style


def smooth(values: list[float], width: int = 5) -> list[float]:
    """Centred moving average (shorter windows at the ends), to read a trend through bucket noise."""
    half = width // 2
    return [
        sum(values[max(0, i - half) : i + half + 1]) / len(values[max(0, i - half) : i + half + 1])
        for i in range(len(values))
    ]


def plot_per_position(per_position: dict[str, Any], title: str) -> Any:
    """Mean loss by position bucket at the longest length: a moving average per method, and the
    raw buckets faint when there are at most two methods (more would pile up in one colour)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.2, 4.6), layout="constrained")
    curves = per_position["methods"]
    raw = len(curves) <= 2
    plotted: list[float] = []
    for method, curve in curves.items():
        xs = [(a + b - 1) / 2 for a, b in zip(curve["start"], curve["end"], strict=True)]
        pts = [(x, y) for x, y in zip(xs, curve["loss"], strict=True) if y is not None]
        if not pts:
            continue
        x, y = zip(*pts, strict=True)
        plotted += smooth(list(y)) + (list(y) if raw else [])
        style = method_style(curve.get("name") or method, method)
        (line,) = ax.plot(
            x,
            smooth(list(y)),
            linestyle=style.dash,
            color=style.color,
            linewidth=1.8,
            label=f"{method} ({curve['protocol']})",
        )
        if raw:
            ax.plot(x, y, color=line.get_color(), linewidth=0.6, alpha=0.3)
    ax.axvline(
        per_position["train_length"],
        color="grey",
        linestyle=":",
        linewidth=1,
        label=f"training length ({per_position['train_length']:,})",
    )
    ax.set_xlabel("position in the window (tokens)")
    ax.set_ylabel("mean loss (nats/token)" + zoom_note(plotted))
    how = "faint: per bucket; bold: " if raw else ""
    ax.set_title(
        f"loss by position at length {per_position['length']:,} ({how}5-bucket moving average)",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside right center", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig
