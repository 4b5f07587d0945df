"""Summaries over seeds that every report view shows the same way: mean ± sample std, n."""

from __future__ import annotations

import math


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value; nan for none)."""
    if not values:
        return math.nan, math.nan
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def mean_std_text(m: float, s: float, n: int, digits: int) -> str:
    """``m ± s`` to ``digits`` places; just ``m`` for one seed, ``–`` for none."""
    if n == 0 or math.isnan(m):
        return "–"
    return f"{m:.{digits}f}" if n == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"
