"""niah_multivalue: RULER's multi-value needle in a haystack, shrunk for byte-level tiny models.

One key gets ``values`` distinct magic numbers in separate needles (the first at a depth in
[0, 1] of the haystack, the others at random depths) in n characters of haystack (RULER's noise
sentences, or KJV text of the instance's split with ``haystack: kjv``); the answer is every
value, in the order the needles appear::

    <haystack> The magic number for qzk is 4817. <haystack> The magic number for qzk is 0932.
    <haystack> What are all the magic numbers for qzk? Answer: <sep> 4817 0932 <eos>

Sizes (defaults, 3-letter keys, 4-digit values, 3 values): three 34-character needles and the
48-character question, so min_length = 150; the answer is 3 values and 2 spaces, 14 characters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.haystack import NeedleTask, compose, needle
from posexp.errors import PosexpError


def question(key: str) -> str:
    """The question that ends the prompt."""
    return f" What are all the magic numbers for {key}? Answer:"


@register_task("niah_multivalue")
class NiahMultivalue(NeedleTask):
    """``values`` needles for one key; the answer is their values in text order."""

    def __init__(
        self,
        haystack: str = "noise",
        values: int = 3,
        key_letters: int = 3,
        value_digits: int = 4,
        depths: Any = (0.0, 0.25, 0.5, 0.75, 1.0),
    ) -> None:
        self.setup(key_letters, value_digits, depths, haystack)
        self.count = integer("data.values", values, 1, 100)
        if self.count > 10**self.value_digits:
            raise PosexpError(
                f"data.values={values} needs more distinct {self.value_digits}-digit values "
                f"than there are; allowed: data.values <= {10**self.value_digits}"
            )
        ask = question("a" * self.key_letters)
        self.min_length = self.count * self.needle_length + len(ask)

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """The key's needles, the first at depth ``variant`` (uniform when None)."""
        self.check_length(n, "needles and question")
        (key,) = self.keys(rng, 1)
        values = self.values(rng, self.count, distinct=True)
        depth = float(rng.random()) if variant is None else variant
        depths = [depth, *rng.random(self.count - 1).tolist()]
        ask = question(key)
        room = n - self.count * self.needle_length - len(ask)
        snippets = [(d, needle(key, v)) for d, v in zip(depths, values, strict=True)]
        text, order = compose(self.filler(rng, room, split, {key}), snippets)
        return text + ask, " ".join(values[i] for i in order)

    def answer_length(self, n: int) -> int:
        """Every value, space-separated."""
        return self.count * (self.value_digits + 1) - 1
