"""niah_multiquery: RULER's multi-query needle in a haystack, shrunk for byte-level tiny models.

``queries`` distinct keys get one needle each (the first at a depth in [0, 1] of the haystack,
the others at random depths) in n characters of haystack (RULER's noise sentences, or KJV text
of the instance's split with ``haystack: kjv``); the question asks for every key, and the answer
is their values in the order asked::

    <haystack> The magic number for bfa is 0932. <haystack> The magic number for qzk is 4817.
    <haystack> What are the magic numbers for qzk, bfa? Answer: <sep> 4817 0932 <eos>

Sizes (defaults, 3-letter keys, 4-digit values, 2 queries): two 34-character needles and the
49-character question, so min_length = 117; the answer is 2 values and a space, 9 characters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.haystack import NeedleTask, compose, needle
from posexp.errors import PosexpError


def question(keys: list[str]) -> str:
    """The question that ends the prompt."""
    return f" What are the magic numbers for {', '.join(keys)}? Answer:"


@register_task("niah_multiquery")
class NiahMultiquery(NeedleTask):
    """One needle for each of ``queries`` keys; the answer is their values as asked."""

    def __init__(
        self,
        haystack: str = "noise",
        queries: int = 2,
        key_letters: int = 3,
        value_digits: int = 4,
        depths: Any = (0.0, 0.25, 0.5, 0.75, 1.0),
    ) -> None:
        self.setup(key_letters, value_digits, depths, haystack)
        self.queries = integer("data.queries", queries, 1, 100)
        if self.queries > 26**self.key_letters:
            raise PosexpError(
                f"data.queries={queries} needs more distinct {self.key_letters}-letter keys "
                f"than there are; allowed: data.queries <= {26**self.key_letters}"
            )
        ask = question(["a" * self.key_letters] * self.queries)
        self.min_length = self.queries * self.needle_length + len(ask)

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """The keys' needles, the first at depth ``variant`` (uniform when None)."""
        self.check_length(n, "needles and question")
        keys = self.keys(rng, self.queries)
        values = self.values(rng, self.queries)
        depth = float(rng.random()) if variant is None else variant
        depths = [depth, *rng.random(self.queries - 1).tolist()]
        ask = question(keys)
        room = n - self.queries * self.needle_length - len(ask)
        snippets = [(d, needle(k, v)) for d, k, v in zip(depths, keys, values, strict=True)]
        text, _ = compose(self.filler(rng, room, split, set(keys)), snippets)
        return text + ask, " ".join(values)

    def answer_length(self, n: int) -> int:
        """Every value, space-separated."""
        return self.queries * (self.value_digits + 1) - 1
