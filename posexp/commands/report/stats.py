"""Summaries over seeds that every report view shows the same way: mean ± sample std, n."""

from __future__ import annotations

import math

from posexp.results.verdict import MIN_SEEDS, NOISE_STDS, mean_std, rule

__all__ = ["MIN_SEEDS", "NOISE_STDS", "beyond_noise", "mean_std", "mean_std_text"]


def mean_std_text(m: float, s: float, n: int, digits: int) -> str:
    """``m ± s`` to ``digits`` places; just ``m`` for one seed, ``–`` for none."""
    if n == 0 or math.isnan(m):
        return "–"
    return f"{m:.{digits}f}" if n == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"


def beyond_noise(gap: float, stds: list[float], n: int) -> str:
    """Words for whether ``gap`` exceeds the seed spread over ``n`` seeds, by the one rule of
    every comparison (posexp.results.verdict)."""
    return rule(gap, stds, n).words()


def paired_differences(a: list[float], b: list[float]) -> tuple[float, float, int]:
    """Mean and sample std of the per-seed differences a_i - b_i, and n."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    mean, std = mean_std(diffs)
    return mean, std, len(diffs)


def decimals_for(value: float, significant: int = 4) -> int:
    """Decimal places that show ``value`` to ``significant`` digits (20.95 → 2, 6.040 → 3)."""
    if value == 0 or not math.isfinite(value):
        return significant - 1
    return max(0, significant - 1 - math.floor(math.log10(abs(value))))
