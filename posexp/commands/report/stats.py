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


# A difference is "beyond seed noise" when it exceeds this many seed standard deviations, with at
# least MIN_SEEDS seeds on each side (the head-count ablation's verdict uses the same rule).
NOISE_STDS = 2.0
MIN_SEEDS = 3


def beyond_noise(gap: float, stds: list[float], n: int) -> str:
    """Words for whether ``gap`` exceeds NOISE_STDS × the largest of ``stds`` over ``n`` seeds."""
    if n < MIN_SEEDS:
        return f"no verdict on seed noise ({n} seed{'s' if n != 1 else ''}; it needs {MIN_SEEDS})"
    noise = max(stds)
    # Seeds that agree exactly (std 0): any gap is beyond their noise, and no gap is within it.
    ratio = abs(gap) / noise if noise > 0 else (math.inf if gap else 0.0)
    side = "beyond" if ratio > NOISE_STDS else "within"
    return f"{side} seed noise ({ratio:.1f}× the larger seed std, n = {n})"


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
