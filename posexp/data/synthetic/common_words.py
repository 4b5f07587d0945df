"""common_words: RULER's common words extraction, shrunk for byte-level tiny models.

A shuffled list of synthetic words (``haystack.vocabulary``) where ``common`` words occur
``common_repeats`` times each and every other word ``rare_repeats`` times; the number of rare
words grows with n. The answer is the common words in the order they first appear::

    Words: bafo rik bafo demu ... rik Question: the 5 most common words? Answer: <sep>
    bafo rik demu sati kol <eos>

Exact length: the rare words' lengths (3-5 letters, drawn 1:2:1 like the vocabulary's) are
chosen so the list fills the prompt to exactly n characters but for fewer than
``4 * rare_repeats`` characters, which are extra spaces after the list (with the defaults, one
space for an odd remainder; up to 7 only when fewer than 16 characters are left for rare words). Sizes (defaults: 5 common words 4 times each, rare words twice):
"Words:" and the 43-character question around at most 20 occurrences of 5-letter words (6
characters each with their space), so min_length = 169; the answer is 5 words and 4 spaces, at
most 29 characters. There are no depth variants.
"""

from __future__ import annotations

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.haystack import RulerTask, pick_words, word_lengths
from posexp.errors import PosexpError

PREFIX = "Words:"


def question(common: int) -> str:
    """The question that ends the prompt."""
    return f" Question: the {common} most common words? Answer:"


@register_task("common_words")
class CommonWords(RulerTask):
    """A shuffled word list; the answer is the ``common`` words repeated most."""

    def __init__(self, common: int = 5, common_repeats: int = 4, rare_repeats: int = 2) -> None:
        self.common = integer("data.common", common, 1, 100)
        self.common_repeats = integer("data.common_repeats", common_repeats, 2, 100)
        self.rare_repeats = integer("data.rare_repeats", rare_repeats, 1, 99)
        if self.rare_repeats >= self.common_repeats:
            raise PosexpError(
                f"data.rare_repeats={rare_repeats} must be below data.common_repeats="
                f"{common_repeats}; allowed: rare_repeats < common_repeats"
            )
        fixed = len(PREFIX) + len(question(self.common))
        self.min_length = fixed + self.common * self.common_repeats * 6

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """A shuffled list of common and rare words (``variant`` is unused)."""
        self.check_length(n, "common words and question")
        ask = question(self.common)
        lengths = (3 + rng.binomial(2, 0.5, size=self.common)).tolist()
        left = n - len(PREFIX) - len(ask) - self.common_repeats * sum(k + 1 for k in lengths)
        rare, pad = word_lengths(rng, left, self.rare_repeats)
        words = pick_words(rng, lengths + rare, f"common_words length {n}")
        tokens = (
            words[: self.common] * self.common_repeats + words[self.common :] * self.rare_repeats
        )
        listed = [tokens[i] for i in rng.permutation(len(tokens))]
        common = set(words[: self.common])
        answer = list(dict.fromkeys(w for w in listed if w in common))
        return PREFIX + "".join(" " + w for w in listed) + " " * pad + ask, " ".join(answer)

    def answer_length(self, n: int) -> int:
        """The common words (5 letters at most), space-separated."""
        return self.common * 6 - 1
