"""Figure layout shared by every plot: wrapped titles, legends outside the data, no overlaps.

Labels come from ``posexp.results.labels`` and can be long (``RoPE [yarn x4 fine-tuned 60 steps]``);
a title wider than its panel runs into the next one and a legend inside a small panel covers
it, so titles are wrapped to the panel's width and legends sit below their panel, where
constrained layout makes room. ``text_overlaps`` finds the text boxes that still collide (a
test draws a many-run report and asserts there are none).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from typing import Any

CHARS_PER_INCH = 11.0  # characters of 10 pt text per inch of panel width, with a margin


# Where a title may break: between clauses (after ";") first, then between phrases (after ":"
# or ",", before "("), and only inside a phrase too long for a line.
CLAUSE_BREAK = re.compile(r"(?<=;)\s+")
PHRASE_BREAK = re.compile(r"(?<=[:,])\s+|\s+(?=\()")


def pack(parts: list[str], width: int, split: Callable[[str], list[str]]) -> list[str]:
    """``parts`` joined greedily into lines of at most ``width``; a part too long for a line
    is broken by ``split`` first."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        elif len(part) <= width:
            lines.append(part)
        else:
            lines += split(part)
    return lines


def wrap_phrases(line: str, width: int) -> list[str]:
    """``line`` in lines of at most ``width`` characters, broken between clauses or phrases
    where they fit (``d_model 128`` stays together) and between words only inside a phrase too
    long for one."""

    def words(phrase: str) -> list[str]:
        return textwrap.wrap(phrase, width, break_on_hyphens=False)

    def phrases(clause: str) -> list[str]:
        return pack(PHRASE_BREAK.split(clause), width, words)

    return pack(CLAUSE_BREAK.split(line), width, phrases) or [line]


def wrapped(text: str, width_in: float, fontsize: float = 10) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``fontsize`` points."""
    width = max(12, int(width_in * CHARS_PER_INCH * 10 / fontsize))
    return "\n".join("\n".join(wrap_phrases(line, width)) for line in text.split("\n"))


# Where a legend label may break: after a space or a comma (``self_extend(group=2,`` then
# ``window=16)``), never inside a name or a number.
LABEL_BREAK = re.compile(r"(?<=[ ,])")
# A count is one piece: ``(n = 2)`` never ends a line at ``(n =``.
COUNT = re.compile(r"\(n = (\d+)\)")


def wrapped_label(label: str, width: int) -> str:
    """A legend label in lines of at most ``width`` characters, broken only after a space or a
    comma; a piece longer than a line stays whole (a wider legend beats a broken word)."""
    lines: list[str] = []
    label = COUNT.sub(lambda m: f"(n\u00a0=\u00a0{m.group(1)})", label)
    for piece in LABEL_BREAK.split(label):
        if lines and len(lines[-1]) + len(piece.rstrip()) <= width:
            lines[-1] += piece
        else:
            lines.append(piece)
    return "\n".join(line.rstrip() for line in lines if line.strip())


def panel_title(ax: Any, text: str, fontsize: float = 10) -> None:
    """A panel's title, wrapped to the panel's width."""
    width = ax.get_position().width * ax.figure.get_figwidth()
    ax.set_title(wrapped(text, width, fontsize), fontsize=fontsize)


def figure_title(fig: Any, text: str, fontsize: float = 11) -> None:
    """The figure's title, wrapped to the figure's width."""
    fig.suptitle(wrapped(text, fig.get_figwidth(), fontsize), fontsize=fontsize)


def legend_below(
    ax: Any, fontsize: float = 7, columns: int = 1, handle_length: float = 2.0
) -> None:
    """The panel's legend under its x label, its entries wrapped to the panel's width
    (``handle_length``: longer line samples, where dashes must show past the markers)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    width = ax.get_position().width * ax.figure.get_figwidth() / columns
    chars = max(12, int(width * CHARS_PER_INCH * 10 / fontsize))
    labels = [wrapped_label(label, chars) for label in labels]
    ax.legend(
        handles,
        labels,
        fontsize=fontsize,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncols=columns,
        handlelength=handle_length,
        frameon=False,
    )


def text_overlaps(fig: Any) -> list[tuple[str, str]]:
    """Pairs of visible texts (titles, labels, ticks, legends) whose boxes intersect once drawn."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [lg for lg in fig.findobj(Legend) if lg.get_visible()]
    skip = {id(t) for lg in legends for t in (*lg.get_texts(), lg.get_title())}
    boxes = [("legend", lg.get_window_extent(renderer)) for lg in legends]
    shown_ticks = []
    for ax in fig.axes:  # a tick outside the axis' view keeps a label object, never drawn
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                skip.update((id(tick.label1), id(tick.label2)))
                if ax.get_visible() and low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    shown_ticks += [t for t in (tick.label1, tick.label2) if t.get_visible()]
    texts = [t for t in fig.findobj(Text) if id(t) not in skip] + shown_ticks
    for text in texts:
        if text.get_visible() and text.get_text().strip():
            boxes.append((text.get_text(), text.get_window_extent(renderer)))
    hits = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1 :]:
            if _area(box_a, box_b) > 1.0:  # more than a shared pixel edge
                hits.append((a, b))
    return hits


def _area(a: Any, b: Any) -> float:
    """The area in pixels where two boxes meet (touching edges meet in none)."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(0.0, w) * max(0.0, h)
