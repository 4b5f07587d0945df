"""niah_multikey: RULER's multi-key needle in a haystack, shrunk for byte-level tiny models.

The queried needle (at a depth in [0, 1] of the haystack) and ``distractors`` needles with other
keys (at random depths) sit in n characters of haystack: RULER's noise sentences, KJV text of the
instance's split (``haystack: kjv``), or nothing but more distractor needles (``haystack:
needles``, cut to length; their keys differ from every placed needle's)::

    <haystack> The magic number for qzk is 4817. <haystack> The magic number for bfa is 0932.
    <haystack> What is the magic number for qzk? Answer: <sep> 4817 <eos>

Sizes (defaults, 3-letter keys, 4-digit values, 3 distractors): four 34-character needles and
the 42-character question, so min_length = 178; the answer is ``value_digits`` characters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.haystack import HAYSTACKS, NeedleTask, compose, haystack, needle
from posexp.data.synthetic.niah_single import question
from posexp.errors import PosexpError


@register_task("niah_multikey")
class NiahMultikey(NeedleTask):
    """The queried needle among distractor needles; the answer is its value."""

    haystacks = (*HAYSTACKS, "needles")

    def __init__(
        self,
        haystack: str = "noise",
        distractors: int = 3,
        key_letters: int = 3,
        value_digits: int = 4,
        depths: Any = (0.0, 0.25, 0.5, 0.75, 1.0),
    ) -> None:
        self.setup(key_letters, value_digits, depths, haystack)
        self.distractors = integer("data.distractors", distractors, 0, 100)
        most = 26**self.key_letters - 1 - (haystack == "needles")  # keys left for distractors
        if self.distractors > most:
            raise PosexpError(
                f"data.distractors={distractors} needs more distinct {self.key_letters}-letter "
                f"keys than there are; allowed: data.distractors <= {most}"
            )
        ask = question("a" * self.key_letters)
        self.min_length = (1 + self.distractors) * self.needle_length + len(ask)

    def filler(self, rng: np.random.Generator, length: int, split: str, keys: Any) -> str:
        """Noise or KJV haystack, or distractor needles whose keys are none of ``keys``."""
        if self.haystack != "needles":
            return haystack(self.haystack, rng, length, split)
        count = length // self.needle_length + 1
        others = [self.keys(rng, 1, exclude=keys)[0] for _ in range(count)]
        return "".join(map(needle, others, self.values(rng, count)))[:length]

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """The queried needle at depth ``variant`` (uniform when None) among distractors."""
        self.check_length(n, "needles and question")
        keys = self.keys(rng, 1 + self.distractors)
        values = self.values(rng, len(keys))
        depth = float(rng.random()) if variant is None else variant
        depths = [depth, *rng.random(self.distractors).tolist()]
        ask = question(keys[0])
        room = n - len(keys) * self.needle_length - len(ask)
        snippets = [(d, needle(k, v)) for d, k, v in zip(depths, keys, values, strict=True)]
        text, _ = compose(self.filler(rng, room, split, set(keys)), snippets)
        return text + ask, values[0]

    def answer_length(self, n: int) -> int:
        """The value."""
        return self.value_digits
