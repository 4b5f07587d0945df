"""The Wycliffe -> King James corpus as plain text, for pre-training a translation model.

The documents of ``wyc2kjv`` (per chapter, the Wycliffe chapter then the King James one, in the
same chapter split) without the verse pairs, so ``posexp train data=wyc2kjv_text`` trains a
language model on both languages. Its train documents are ``wyc2kjv``'s, so a BPE learned on
them is ``wyc2kjv``'s too, and ``posexp train data=wyc2kjv parent=<that run>`` starts the
translation from the language model's weights (the CPU head ablation on translation does).
"""

from __future__ import annotations

from posexp.data.registry import Corpus, register_dataset
from posexp.data.wyc2kjv import load_wyc2kjv


@register_dataset("wyc2kjv_text", kind="lm")
def load_wyc2kjv_text() -> Corpus:
    """wyc2kjv's chapter documents (both editions) as a language-model corpus."""
    return Corpus(splits=load_wyc2kjv().splits, kind="lm")
