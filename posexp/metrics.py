"""Translation metrics: sacrebleu corpus BLEU and chrF, and the copy baseline beside them.

Both are sacrebleu's defaults (BLEU: 13a tokenisation, exponential smoothing, one reference;
chrF: character 6-grams, beta 2), on a 0..100 scale. The copy baseline scores the source
sentences themselves as hypotheses: a model that does not beat it has learned nothing.
"""

from __future__ import annotations

from collections.abc import Sequence


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
