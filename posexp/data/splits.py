"""Deterministic train/val/test assignment rules shared by the loaders."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from posexp.errors import PosexpError

T = TypeVar("T")


def periodic_split(index: int, period: int) -> str:
    """Split of the `index`-th unit: the last two of every `period` go to val and test."""
    r = index % period
    return "val" if r == period - 2 else "test" if r == period - 1 else "train"


def carve_bounds(
    n: int,
    what: str,
    hint: str | Callable[[], str],
    fraction: float = 0.05,
    need: tuple[str, ...] = ("val", "test"),
) -> dict[str, tuple[int, int]]:
    """(start, stop) of each split when the `need`ed splits are carved off the end of `n` units:
    each gets `fraction` (at least one unit); see ``carve_tail``."""
    k = max(1, round(fraction * n))
    if n < len(need) * k + 1:
        raise PosexpError(
            f"{what} has only {n} document{'s' * (n != 1)}, too few to carve "
            f"{'/'.join(need)} from it (at least {len(need) * k + 1}); "
            f"{hint() if callable(hint) else hint}"
        )
    out: dict[str, tuple[int, int]] = {}
    end = n
    for split in reversed(sorted(need, key=("val", "test").index)):
        out[split] = (end - k, end)
        end -= k
    out["train"] = (0, end)
    return out


def carve_tail(
    units: Sequence[T],
    what: str,
    hint: str | Callable[[], str],
    fraction: float = 0.05,
    need: tuple[str, ...] = ("val", "test"),
) -> dict[str, list[T]]:
    """Carve the `need`ed splits off the end of `units`: each gets `fraction` (at least one unit).

    The tail, not a scatter, so neighbouring paragraphs of one text do not leak across splits;
    test is the very end, val just before it, train the rest in the original order. ``hint``
    says what can fix too few units; a callable is asked only then (it may read files again).
    """
    bounds = carve_bounds(len(units), what, hint, fraction, need)
    return {split: list(units[a:b]) for split, (a, b) in bounds.items()}
