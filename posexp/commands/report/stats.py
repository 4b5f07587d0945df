"""Summaries over seeds that every report view shows the same way: mean ± sample std, n."""

from __future__ import annotations

import math

from posexp.results.verdict import MIN_SEEDS, NOISE_STDS, decimals_for, mean_std

__all__ = ["MIN_SEEDS", "NOISE_STDS", "decimals_for", "mean_std", "mean_std_text"]


def mean_std_text(m: float, s: float, n: int, digits: int) -> str:
    """``m ± s`` to ``digits`` places; just ``m`` for one seed, ``–`` for none."""
    if n == 0 or math.isnan(m):
        return "–"
    return f"{m:.{digits}f}" if n == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"
