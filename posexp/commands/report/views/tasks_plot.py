"""The length-generalization view's figure: one panel per task, accuracy against test size."""

from __future__ import annotations

from typing import Any

from posexp.commands.report.view import ReportContext
from posexp.pe.base import PEDisplay


def ordered(pes: Any) -> list[PEDisplay]:
    """PEs in the order they declare (posexp/pe), unknown ones last."""
    return sorted(pes, key=lambda p: p.sort_key)


def plot(
    ctx: ReportContext, data: dict[str, dict[PEDisplay, dict[int, float]]], top: tuple[int, int]
) -> Any:
    """One panel per task, accuracy against size, one line per PE, training sizes shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.commands.extrapolate.plots import DASHES, MARKERS
    from posexp.commands.report.views.findings import pe_colors

    tasks = list(data)
    # One style per PE across panels (tasks may have been run with different PEs), so that the
    # one legend holds for every panel.
    style = {pe: i for i, pe in enumerate(ordered({p for table in data.values() for p in table}))}
    # Tall enough for the legend beside the panels (one line per PE, and the training span).
    height = max(4.2, 0.27 * (len(style) + 1) + 1.2)
    fig, axes = plt.subplots(
        1,
        len(tasks),
        figsize=(4.6 * len(tasks) + 2.4, height),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    colors = pe_colors(ctx)  # each PE's colour in every figure of the report
    for ax, task in zip(axes[0], tasks, strict=True):
        sizes = sorted({n for by in data[task].values() for n in by})
        for pe in ordered(data[task]):
            pts, i = sorted(data[task][pe].items()), style[pe]
            if not pts:  # measured at no size (see the table's note): no line
                continue
            ax.plot(
                *zip(*pts, strict=True),
                marker=MARKERS[i % len(MARKERS)],
                color=colors.get(pe) or f"C{i % 10}",
                linestyle=DASHES[i % len(DASHES)],
                label=pe.label,
            )
        ax.axvspan(
            top[0], top[1], color="grey", alpha=0.12, label=f"training sizes {top[0]}–{top[1]}"
        )
        ax.set_xticks(sizes)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(task, fontsize=11)
        ax.set_xlabel("test size (symbols / digits per operand)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("exact-match accuracy")
    legend: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    lines = [pe.label for pe in style]
    shown = lines + [label for label in legend if label not in lines]  # then the shaded span
    # Centred beside the panels, below the title's line; one panel's title takes two lines.
    fig.legend([legend[label] for label in shown], shown, loc="outside right center", fontsize=9)
    gap = "\n" if len(tasks) == 1 else " "
    fig.suptitle(
        f"Length generalization:{gap}test accuracy against size, per positional encoding",
        fontsize=11,
    )
    return ctx.save_figure(fig, "report_length_generalization.png")
