"""niah_single: RULER's single needle in a haystack, shrunk for byte-level tiny models.

One needle states a random key's magic number inside n characters of haystack (RULER's noise
sentences, or KJV text of the instance's split with ``haystack: kjv``), at a depth in [0, 1] of
the haystack (0: at the start, 1: just before the question)::

    <haystack> The magic number for qzk is 4817. <haystack> What is the magic number for qzk?
    Answer: <sep> 4817 <eos>

The haystack has no digit, so the value is the only number in the prompt. Sizes (defaults, 3-letter
keys, 4-digit values): the needle is 34 characters and the question 42, so min_length = 76; the
answer is ``value_digits`` characters. Training draws the depth uniformly; evaluation reports
each of ``depths``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.haystack import NeedleTask, compose, needle


def question(key: str) -> str:
    """The question that ends the prompt."""
    return f" What is the magic number for {key}? Answer:"


@register_task("niah_single")
class NiahSingle(NeedleTask):
    """One needle in n characters of haystack; the answer is its value."""

    def __init__(
        self,
        haystack: str = "noise",
        key_letters: int = 3,
        value_digits: int = 4,
        depths: Any = (0.0, 0.25, 0.5, 0.75, 1.0),
    ) -> None:
        self.setup(key_letters, value_digits, depths, haystack)
        self.min_length = self.needle_length + len(question("a" * self.key_letters))

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """A needle at depth ``variant`` (uniform when None) in haystack of ``split``."""
        self.check_length(n, "needle and question")
        (key,), (value,) = self.keys(rng, 1), self.values(rng, 1)
        depth = float(rng.random()) if variant is None else variant
        ask = question(key)
        room = n - self.needle_length - len(ask)
        text, _ = compose(self.filler(rng, room, split, {key}), [(depth, needle(key, value))])
        return text + ask, value

    def answer_length(self, n: int) -> int:
        """The value."""
        return self.value_digits
