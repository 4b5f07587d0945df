"""The one rule every comparative sentence obeys: PE against PE, method against method, run
against a paper.

A difference is a verdict only with at least ``MIN_SEEDS`` seeds and a gap beyond the seeds'
spread: the mean per-seed (paired) difference must exceed ``NOISE_STDS`` times the largest of
the two sides' seed standard deviations and the paired differences' own. Anything less says so
in words (``n = 2: no verdict``) and names no winner. A published number has no seeds: it is
set beside a run only at the same multiple of the training length or, said as such, the
nearest published one, named with its setting, and only when the run's data is the paper's;
otherwise the sentence says ``not comparable: other data``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

NOISE_STDS = 2.0
MIN_SEEDS = 3


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value; nan for none)."""
    if not values:
        return math.nan, math.nan
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


@dataclass(frozen=True)
class Verdict:
    """The outcome of the rule on one difference (``gap`` = a - b)."""

    gap: float
    spread: float  # the seed spread the gap is measured against
    n: int  # seeds (pairs) behind the gap

    @property
    def decided(self) -> bool:
        """True when the data supports a verdict: enough seeds and a gap beyond the spread."""
        return self.n >= MIN_SEEDS and abs(self.gap) > NOISE_STDS * self.spread

    @property
    def ratio(self) -> float:
        """The gap in units of the spread (inf where seeds agree exactly and the gap is not 0)."""
        if self.spread > 0:
            return abs(self.gap) / self.spread
        return math.inf if self.gap else 0.0

    def words(self) -> str:
        """``n = 2: no verdict``, ``within seed noise (...)`` or ``beyond seed noise (...)``."""
        if self.n < MIN_SEEDS:
            return f"n = {self.n}: no verdict (it needs {MIN_SEEDS} seeds)"
        side = "beyond" if self.decided else "within"
        return f"{side} seed noise ({self.ratio:.1f}× the larger seed std, n = {self.n})"


def rule(gap: float, spreads: Sequence[float], n: int) -> Verdict:
    """The rule on a difference already summarised: ``gap`` against the largest of ``spreads``
    (seed standard deviations) over ``n`` seeds."""
    finite = [s for s in spreads if s is not None and not math.isnan(s)]
    return Verdict(gap, max(finite, default=0.0), n)


def paired(a: Sequence[float], b: Sequence[float]) -> Verdict:
    """The rule on two sides' per-seed values, seed i of ``a`` paired with seed i of ``b``."""
    if len(a) != len(b):
        # Unpaired seeds: only the seeds both sides share could pair, and the caller knows
        # which those are; compared as given, the smaller count bounds the verdict.
        gap = mean_std(a)[0] - mean_std(b)[0]
        return rule(gap, [mean_std(a)[1], mean_std(b)[1]], min(len(a), len(b)))
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    gap, diff_std = mean_std(diffs)
    return rule(gap, [mean_std(a)[1], mean_std(b)[1], diff_std], len(diffs))


def compare(
    subject: str,
    a: Sequence[float],
    other: str,
    b: Sequence[float],
    *,
    what: str = "ppl",
    lower_is_better: bool = True,
    where: str = "",
) -> str:
    """One sentence comparing ``subject`` (per-seed values ``a``) with ``other`` (``b``), under
    the rule: a named winner only when the rule decides, else the count and ``no verdict``."""
    verdict = paired(a, b)
    place = f" {where}" if where else ""
    if verdict.n < MIN_SEEDS:
        return f"{subject} against {other}{place} ({what}): {verdict.words()}."
    ma, mb = mean_std(a)[0], mean_std(b)[0]
    digits = decimals_for(max(abs(ma), abs(mb)))
    numbers = f"{ma:.{digits}f} against {mb:.{digits}f}"
    if not verdict.decided:
        return f"{subject} and {other}{place} are level on {what} ({numbers}: {verdict.words()})."
    better = (verdict.gap < 0) == lower_is_better
    return (
        f"{subject} is {'better' if better else 'worse'} than {other}{place} on {what} "
        f"({numbers}: {verdict.words()})."
    )


@dataclass(frozen=True)
class Published:
    """A paper's number at one multiple of its training length, with what it was measured on."""

    cite: str
    setting: str  # model size and data, as the paper states them
    value: float
    multiple: float  # its length / its training length
    same_data: bool  # the run's data is the paper's


def against_paper(
    subject: str, values: Sequence[float], multiple: float, paper: Published, what: str
) -> str:
    """A run's per-seed ``values`` at ``multiple`` × its training length beside a paper's
    number, under the rule: the paper's multiple is said (the same, or the nearest published),
    its setting named, and a run on other data is not compared at all."""
    if not paper.same_data:
        return f"{subject} against {paper.cite} ({what}): not comparable: other data."
    mean, std = mean_std(values)
    at = (
        f"at the same multiple, {multiple:g}× L_train"
        if math.isclose(multiple, paper.multiple, rel_tol=0.02)
        else f"at {multiple:g}× L_train; the nearest published multiple is {paper.multiple:.1f}×"
    )
    gap = rule(mean - paper.value, [std], len(values))
    here = f"{mean:.2f}" + (f" ± {std:.2f}" if len(values) > 1 else "")
    return (
        f"{subject} {what} {here} {at}; {paper.cite} ({paper.setting}): "
        f"{paper.value:.2f} — {gap.words()}."
    )


def decimals_for(value: float, significant: int = 4) -> int:
    """Decimal places that show ``value`` to ``significant`` digits (20.95 → 2, 6.040 → 3)."""
    if value == 0 or not math.isfinite(value):
        return significant - 1
    return max(0, significant - 1 - math.floor(math.log10(abs(value))))


def compare_cells(
    subject: str,
    other: str,
    cells: Sequence[tuple[Sequence[float], Sequence[float]]],
    *,
    where: str = "",
    lower_is_better: bool = True,
) -> str:
    """``subject`` against ``other`` over several cells (each: the two sides' per-seed values),
    every cell judged by the rule: how many are better or worse beyond seed noise, and how many
    within it; with fewer than MIN_SEEDS seeds, no verdict at all."""
    verdicts = [paired(a, b) for a, b in cells]
    place = f" {where}" if where else ""
    n = min((v.n for v in verdicts), default=0)
    if n < MIN_SEEDS:
        cells_text = f"{len(verdicts)} cell{'s' * (len(verdicts) != 1)}"
        return (
            f"{subject} against {other}{place}: n = {n}: no verdict over {cells_text} "
            f"(it needs {MIN_SEEDS} seeds)"
        )
    better = sum(v.decided and (v.gap < 0) == lower_is_better for v in verdicts)
    worse = sum(v.decided for v in verdicts) - better
    level = len(verdicts) - better - worse
    if better > len(verdicts) / 2:
        head = f"{subject} is better than {other}{place} in {better} of {len(verdicts)} cells"
    elif worse > len(verdicts) / 2:
        head = f"{subject} is worse than {other}{place} in {worse} of {len(verdicts)} cells"
    else:
        head = f"{subject} and {other}{place}: no verdict over {len(verdicts)} cells"
    return (
        f"{head} ({better} better, {worse} worse beyond seed noise, {level} within it; "
        f"a cell counts when its paired gap exceeds {NOISE_STDS:g}× the larger seed std, "
        f"n = {n} seeds)"
    )
