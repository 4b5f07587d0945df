"""Translation metrics (sacrebleu corpus BLEU and chrF, the copy baseline beside them), and how
every metric is written in logs and tables: a fixed number of decimals per kind of metric.

Both are sacrebleu's defaults (BLEU: 13a tokenisation, exponential smoothing, one reference;
chrF: character 6-grams, beta 2), on a 0..100 scale. The copy baseline scores the source
sentences themselves as hypotheses: a model that does not beat it has learned nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

# Decimals per metric kind (by the name's ending), so a column or a log reads 10.80 beside 10.82.
DECIMALS = {"loss": 4, "ppl": 2, "accuracy": 3, "bleu": 2, "chrf": 2}


def clock_text(seconds: float) -> str:
    """1h02m, 3m05s or 42s."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def metric_text(name: str, value: float) -> str:
    """``value`` with the fixed decimals of its metric kind (4 significant digits otherwise)."""
    kind = next((k for k in DECIMALS if name.lower().endswith(k)), None)
    if kind is None or abs(value) >= 1e6:
        return f"{value:.4g}"
    return f"{value:.{DECIMALS[kind]}f}"


def _check(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus BLEU (0..100) of one hypothesis per reference."""
    import sacrebleu

    _check(hypotheses, references)
    if not hypotheses:
        return 0.0
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus chrF (0..100) of one hypothesis per reference."""
    import sacrebleu

    _check(hypotheses, references)
    if not hypotheses:
        return 0.0
    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)


def translation_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """{"bleu": ..., "chrf": ...} of the hypotheses against the references."""
    return {
        "bleu": corpus_bleu(hypotheses, references),
        "chrf": corpus_chrf(hypotheses, references),
    }


def copy_baseline(sources: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """BLEU and chrF of the sources copied as hypotheses ({"bleu", "chrf"})."""
    return translation_scores(sources, references)
