"""passkey: retrieve a random key stated once inside long filler text (Mohtashami & Jaggi 2023).

The prompt is n characters (n byte tokens) of King James Bible text, taken from the split the
instance belongs to, with the key sentence inserted at a depth in [0, 1] of the filler (0: at
the start, 1: just before the question) and the question at the end::

    <filler> The pass key is 48213. Remember it. <filler> What is the pass key? The pass key is
    <sep> 48213 <eos>

The key is stated once; KJV text (verse numbers stripped) has no digits, so the key is the
only number in the prompt.

Training draws the depth uniformly; evaluation reports each of ``depths``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import Task, depth_list, register_task
from posexp.errors import PosexpError

QUESTION = " What is the pass key? The pass key is"


def needle(key: str) -> str:
    """The sentence that states the key."""
    return f" The pass key is {key}. Remember it. "


@register_task("passkey")
class Passkey(Task):
    """A ``key_digits``-digit key hidden in n characters of filler; the answer is the key."""

    unit = "tokens"
    report_view = "passkey"  # accuracy by key depth and length, zero-shot and fine-tuned

    def __init__(self, key_digits: int = 5, depths: Any = (0.0, 0.5, 1.0)) -> None:
        self.key_digits = integer("data.key_digits", key_digits, 1, 12)
        self.variants = depth_list(depths)
        self.min_length = len(needle("0" * self.key_digits)) + len(QUESTION)
        self._filler: dict[str, str] = {}

    def filler(self, split: str) -> str:
        """The KJV text of ``split`` as one ASCII string (loaded once)."""
        if split not in self._filler:
            from posexp.data.registry import load_corpus

            docs = load_corpus("kjv").splits[split]
            text = " ".join(docs).encode("ascii", "replace").decode("ascii")
            self._filler[split] = text
        return self._filler[split]

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """Filler of ``split`` with a random key at depth ``variant`` (random when None)."""
        key = "".join(str(d) for d in rng.integers(0, 10, size=self.key_digits))
        sentence = needle(key)
        room = n - len(sentence) - len(QUESTION)
        if room < 0:
            raise PosexpError(
                f"passkey length {n} is shorter than its key sentence and question; "
                f"allowed: lengths >= {self.min_length}"
            )
        depth = float(rng.random()) if variant is None else variant
        text = self.filler(split)
        start = int(rng.integers(0, len(text) - room))
        before = round(depth * room)
        prompt = (
            text[start : start + before] + sentence + text[start + before : start + room] + QUESTION
        )
        return prompt, key

    def prompt_length(self, n: int) -> int:
        """n characters: filler, key sentence and question together."""
        return n

    def answer_length(self, n: int) -> int:
        """The key."""
        return self.key_digits
