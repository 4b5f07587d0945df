"""The length-generalization view's figure: one panel per task, accuracy against test size."""

from __future__ import annotations

from typing import Any

from posexp.commands.report.view import ReportContext
from posexp.pe.base import PEDisplay


def ordered(pes: Any) -> list[PEDisplay]:
    """PEs in the order they declare (posexp/pe), unknown ones last."""
    return sorted(pes, key=lambda p: p.sort_key)


PANELS_PER_ROW = 4


def unit_of(task: str) -> str:
    """What a size counts for ``task`` (its ``unit``), or "symbols / digits per operand" for a
    name that is no registered task (a swept config such as ``addition_lsb``)."""
    from posexp.data.synthetic import TASKS

    return TASKS[task].unit if task in TASKS else "symbols / digits per operand"


def plot(
    ctx: ReportContext, data: dict[str, dict[PEDisplay, dict[int, float]]], top: tuple[int, int]
) -> Any:
    """One panel per task, accuracy against size, one line per PE, training sizes shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.commands.report.views.findings import pe_colors
    from posexp.results.curves import DASHES, MARKERS, gapped, gaps_note, not_scored

    tasks = list(data)
    cols = min(len(tasks), PANELS_PER_ROW)  # a mixture's eight tasks: two rows, not one
    rows = -(-len(tasks) // cols)
    # One style per PE across panels (tasks may have been run with different PEs), so that the
    # one legend holds for every panel.
    style = {pe: i for i, pe in enumerate(ordered({p for table in data.values() for p in table}))}
    # Tall enough for the legend beside the panels (one line per PE, and the training span).
    height = max(4.2, 0.27 * (len(style) + 1) + 1.2)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(4.6 * cols + 2.4, max(height, 4.2 * rows)),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    colors = pe_colors(ctx)  # each PE's colour in every figure of the report
    lines: dict[PEDisplay, Any] = {}
    lacks: dict[PEDisplay, dict[str, list[int]]] = {}  # PE -> task -> sizes its line lacks
    for ax in axes.flat[len(tasks) :]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks, strict=False):
        sizes = sorted({n for by in data[task].values() for n in by})
        for pe in ordered(data[task]):
            i = style[pe]
            if not data[task][pe]:  # measured at no size (see the table's note): no line
                continue
            xs, ys, missing = gapped(data[task][pe], sizes)
            (line,) = ax.plot(
                xs,
                ys,
                marker=MARKERS[i % len(MARKERS)],
                color=colors.get(pe) or f"C{i % 10}",
                linestyle=DASHES[i % len(DASHES)],
                label=pe.label + not_scored(missing),
            )
            lines[pe] = line
            lacks.setdefault(pe, {})[task] = missing
        span = ax.axvspan(
            top[0], top[1], color="grey", alpha=0.12, label=f"training sizes {top[0]}–{top[1]}"
        )
        ax.set_xticks(sizes)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(task, fontsize=11)
        ax.set_xlabel(f"test size ({unit_of(task)})")
        ax.grid(True, alpha=0.3)
    for row in axes:
        row[0].set_ylabel("exact-match accuracy")
    # One entry per PE for every panel, naming the sizes its line lacks (in which task, where
    # the tasks differ), then the shaded span.
    drawn = [pe for pe in style if pe in lines]
    handles = [lines[pe] for pe in drawn] + [span]
    shown = [pe.label + gaps_note(lacks[pe]) for pe in drawn] + [span.get_label()]
    # Centred beside the panels, below the title's line; one panel's title takes two lines.
    fig.legend(handles, shown, loc="outside right center", fontsize=9)
    gap = "\n" if len(tasks) == 1 else " "
    fig.suptitle(
        f"Length generalization:{gap}test accuracy against size, per positional encoding",
        fontsize=11,
    )
    return ctx.save_figure(fig, "report_length_generalization.png")
