"""sacrebleu wiring: perfect hypotheses score 100; the copy baseline is sacrebleu on the sources."""

from __future__ import annotations

import pytest
import sacrebleu

from posexp.scoring.metrics import (
    copy_baseline,
    corpus_bleu,
    corpus_chrf,
    metric_text,
    translation_scores,
)

SOURCES = [
    "Forsothe the Lord puttide a word in his mouth, and seide, Turne ayen to Balaach",
    "In the bigynnyng God made of nouyt heuene and erthe.",
    "And God seide, Liyt be maad, and liyt was maad.",
]
REFERENCES = [
    "And the LORD put a word in Balaam's mouth, and said, Return unto Balak",
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
]


def test_hypothesis_equal_to_reference_scores_100():
    assert corpus_bleu(REFERENCES, REFERENCES) == pytest.approx(100.0)
    assert corpus_chrf(REFERENCES, REFERENCES) == pytest.approx(100.0)
    assert translation_scores(REFERENCES, REFERENCES) == pytest.approx(
        {"bleu": 100.0, "chrf": 100.0}
    )


def test_copy_baseline_is_sacrebleu_on_the_same_lists():
    got = copy_baseline(SOURCES, REFERENCES)
    assert got["bleu"] == pytest.approx(sacrebleu.corpus_bleu(SOURCES, [REFERENCES]).score)
    assert got["chrf"] == pytest.approx(sacrebleu.corpus_chrf(SOURCES, [REFERENCES]).score)
    assert 0 < got["bleu"] < 100 and 0 < got["chrf"] < 100


def test_mismatched_lengths_and_empty_lists():
    with pytest.raises(ValueError):
        corpus_bleu(["a"], ["a", "b"])
    assert corpus_bleu([], []) == 0.0 and corpus_chrf([], []) == 0.0


def test_metric_text_keeps_fixed_decimals_per_kind():
    assert metric_text("val/ppl", 10.8) == "10.80" and metric_text("val/ppl", 10.82) == "10.82"
    assert metric_text("final/val_loss", 2.88) == "2.8800"
    assert metric_text("val/accuracy", 0.5) == "0.500"
    assert metric_text("final/bleu", 6.0) == "6.00"
    assert metric_text("tokens_per_s", 12345.0) == "1.234e+04"  # unknown kind: 4 significant
