"""Means over needle (key) depths that stay comparable from cell to cell.

Evaluations accumulate: ``eval-extrapolate --method pi --depths 0.25`` adds depth 0.25 to pi's
cells and to no other. A cell that averaged the depths it happens to have would then average
other depths than its neighbours, and a gap between two cells could be nothing but the depths.
So every compared cell averages the same depths: those every cell was scored at. Where no depth
is common to all of them, the depths the most cells share are the reference, and a cell without
them is the mean of its own depths, marked (``MARK``) and named in a note. The report's passkey
and RULER views and `eval-extrapolate`'s figure of a RULER mixture all go through
``common_depths``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
Depth = float | None  # None: a task without depths (variable_tracking), scored once per size
MARK = "†"  # a cell whose mean is of other depths than the rest (``DepthMeans.own``)


def depth_key(depth: Depth) -> tuple[bool, float]:
    """Sort key for depths: ascending, None (no depth) last."""
    return (depth is None, depth or 0.0)


def depths_text(depths: tuple[Depth, ...] | list[Depth]) -> str:
    """``0, 0.5, 1`` (each as ``:g``)."""
    return ", ".join("none" if d is None else f"{d:g}" for d in depths)


def depths_phrase(depths: tuple[Depth, ...] | list[Depth], noun: str) -> str:
    """``key depth 0.5``, ``key depths 0, 0.5, 1``."""
    return f"{noun}{'s' * (len(depths) != 1)} {depths_text(depths)}"


@dataclass(frozen=True)
class DepthMeans(Generic[K]):
    """Each cell's mean over ``depths``, and the cells whose depths differ from them."""

    depths: tuple[Depth, ...]  # what every cell averages (the reference where ``own`` is not {})
    means: dict[K, float]  # cell -> mean over ``depths`` (over its own depths for ``own``)
    more: dict[K, tuple[Depth, ...]]  # cell -> the depths it also has, left out of its mean
    own: dict[K, tuple[Depth, ...]]  # cell -> its depths, which lack some of ``depths``


def common_depths(cells: Mapping[K, Mapping[Depth, float]]) -> DepthMeans[K]:
    """Each cell's mean over the depths every cell of ``cells`` (cell -> depth -> value) was
    scored at; where no depth is common to all, over the depth set the most cells hold (then
    the larger set), cells that lack it averaging their own depths (``own``). Empty cells are
    left out."""
    sets = {k: frozenset(v) for k, v in cells.items() if v}
    if not sets:
        return DepthMeans((), {}, {}, {})
    every = frozenset.intersection(*sets.values())
    if every:
        used = every
    else:
        candidates = sorted(set(sets.values()), key=lambda s: sorted(map(depth_key, s)))
        used = max(
            candidates, key=lambda s: (sum(s <= t for t in sets.values()), len(s))
        )  # a set some cell was scored at: never empty
    means: dict[K, float] = {}
    more: dict[K, tuple[Depth, ...]] = {}
    own: dict[K, tuple[Depth, ...]] = {}
    for k, depths in sets.items():
        values = cells[k]
        if used <= depths:
            means[k] = sum(values[d] for d in used) / len(used)
            if depths - used:
                more[k] = tuple(sorted(depths - used, key=depth_key))
        else:
            means[k] = sum(values.values()) / len(values)
            own[k] = tuple(sorted(depths, key=depth_key))
    return DepthMeans(tuple(sorted(used, key=depth_key)), means, more, own)


def averaged_text(result: DepthMeans[K], noun: str) -> str:
    """What a caption says the cells average: ``key depths 0, 0.5, 1, the ones every cell was
    scored at``, or the reference depths with the marked cells' exception."""
    plural = depths_phrase(result.depths, noun)
    if result.own:
        return f"{plural}, those most cells were scored at ({MARK}: a cell's own {noun}s)"
    return f"{plural}, the ones every cell was scored at"


def cells_text(
    cells: Mapping[K, tuple[Depth, ...]],
    where: Callable[[K], tuple[str, str]],
    unit: str,
    noun: str,
) -> str:
    """``pi (zero-shot) at 96, 128 tokens (key depth 0.25)``: ``cells`` (cell -> depths) grouped
    by row and depths, ``where`` naming a cell's (row, column); in order of first appearance."""
    groups: dict[tuple[str, tuple[Depth, ...]], list[str]] = {}
    for k, depths in cells.items():
        row, column = where(k)
        columns = groups.setdefault((row, depths), [])
        if column not in columns:  # a cell's seeds: one mention
            columns.append(column)
    return "; ".join(
        f"{row} at {', '.join(columns)}{unit} ({depths_phrase(depths, noun)})"
        for (row, depths), columns in groups.items()
    )


def depths_note(
    result: DepthMeans[K],
    where: Callable[[K], tuple[str, str]],
    unit: str,
    noun: str,
    scope: str = "",
) -> str:
    """Sentences for under a table: the cells whose depths beyond ``result.depths`` were left out
    of their means, and the cells marked ``MARK`` (their own depths); "" when every cell has
    exactly ``result.depths``. ``where``: a cell's (row, column) as the table names them;
    ``scope``: what the cells are of where a table has several sets (a task's name)."""
    of = f" {scope}" if scope else ""
    out = []
    if result.more:
        out.append(
            f"Left out of the{of} means so that the cells average the same {noun}s "
            f"({depths_text(result.depths)}): {cells_text(result.more, where, unit, noun)}."
        )
    if result.own:
        out.append(
            f"{MARK} No{of} {noun} was scored in every cell: these cells lack some of "
            f"{depths_text(result.depths)} and are the mean of the {noun}s they have, not comparable "
            f"with the other cells: {cells_text(result.own, where, unit, noun)}."
        )
    return " ".join(out)


def panel(record: dict[str, Any]) -> str:
    """What a plot panel / table row group shows: the protocol, and the key depth if any (a
    mixture task's depths averaged by ``over_depths``: the ones its ``depths`` names)."""
    depth, part = record.get("depth"), record.get("task")
    if part is not None:  # a mixture's task: its needle depth, if it has one
        return (
            part + record.get("depths", "")
            if depth is None
            else f"{part}, needle at depth {depth:g}"
        )
    return record["protocol"] if depth is None else f"key at depth {depth:g}"


def over_depths(records: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """A mixture's records with each task's depths averaged (one panel per task, not per task
    and depth) over the depths every method and length of the task was scored at
    (``common_depths``), the panel's title naming them and any left out; a task with no depth
    common to all keeps one panel per depth. Records of single tasks unchanged."""
    if not any(r.get("task") for r in records):
        return records
    groups: dict[tuple, dict[tuple[str, int], list[dict[str, Any]]]] = {}
    for r in records:
        cell = (r["method"], r["length"])
        groups.setdefault((r["protocol"], r.get("task")), {}).setdefault(cell, []).append(r)
    out = []
    for cells in groups.values():
        values = {
            cell: {r.get("depth"): r[metric] for r in rows if r.get(metric) is not None}
            for cell, rows in cells.items()
        }
        found = common_depths(values)
        if found.own:  # no depth every cell has: no mean compares, each depth its own panel
            out += [r for rows in cells.values() for r in rows]
            continue
        title = ""
        if any(d is not None for d in found.depths):
            title = f", mean over needle depths {depths_text(found.depths)}"
        if found.more:
            left = cells_text(found.more, lambda cell: (cell[0], f"{cell[1]:,}"), "", "depth")
            title += f"; left out: {left}"
        for cell, rows in cells.items():
            out.append({**rows[0], "depth": None, metric: found.means.get(cell), "depths": title})
    return out
