"""sacrebleu wiring: perfect hypotheses score 100; the copy baseline is sacrebleu on the sources."""

from __future__ import annotations

import pytest
import sacrebleu

from posexp.metrics import copy_baseline, corpus_bleu, corpus_chrf, translation_scores

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
