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
    """One panel per task, accuracy against size, one line per PE (in the style registry's
    colour, marker and dash), training sizes shaded; drawn by ``posexp.results.curves``."""
    from posexp.results.curves import Curve, Guide, Panel, plot_scores
    from posexp.results.style import display_style

    def style(pe: PEDisplay) -> Any:
        return display_style(pe)

    panels = [
        Panel(
            task,
            [
                Curve(pe.label, dict(by_size), style(pe), style(pe).dash)
                for pe, by_size in ((pe, data[task][pe]) for pe in ordered(data[task]))
            ],
            f"test size ({unit_of(task)})",
        )
        for task in data
    ]
    fig = plot_scores(
        panels,
        "Length generalization: test accuracy against size, per positional encoding",
        "exact-match accuracy",
        "test size",
        [Guide("span", (top[0], top[1]), f"training sizes {top[0]}–{top[1]}")],
        # one legend for every panel: each PE of any task, in the order the PEs declare
        order=[pe.label for pe in ordered({pe for table in data.values() for pe in table})],
        per_row=PANELS_PER_ROW,
    )
    return ctx.save_figure(fig, "report_length_generalization.png")
