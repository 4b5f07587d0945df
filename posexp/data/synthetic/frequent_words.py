"""frequent_words: RULER's frequent words extraction, shrunk for byte-level tiny models.

A shuffled text of coded words (synthetic words, ``haystack.vocabulary``) with Zipf counts: rank
r gets ``floor(scale / r^alpha)`` occurrences, the largest scale that fits n characters; rank 1
is the noise token ``...`` (as in RULER), not a coded word. The answer is the ``top`` most
frequent coded words (ranks 2 to top + 1), most frequent first::

    Text: ... bafo ... rik ... bafo ... demu ... Question: the 3 most frequent coded words?
    Answer: <sep> bafo rik demu <eos>

Well posed: the counts of ranks 2 to top + 2 are raised where needed to be strictly decreasing
(rank top + 2 at least once), so no tie decides the answer; ``...`` occurs at least as often as
rank 2. The characters the Zipf text leaves are filled with coded words that occur once (the
tail), and fewer than 4 with spaces after the text. Sizes (defaults: alpha 2, top 3): "Text:",
the 51-character question and the smallest text (``...`` 4 times, ranks 2-5 4, 3, 2 and 1 times,
at most 5 letters each), so min_length = 132; the answer is 3 words and 2 spaces, at most 17
characters. There are no depth variants.
"""

from __future__ import annotations

import numpy as np

from posexp.checks import integer, number
from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.haystack import RulerTask, pick_words, word_lengths

PREFIX = "Text:"
NOISE_TOKEN = "..."


def question(top: int) -> str:
    """The question that ends the prompt."""
    return f" Question: the {top} most frequent coded words? Answer:"


@register_task("frequent_words")
class FrequentWords(RulerTask):
    """Zipf-distributed coded words; the answer is the ``top`` most frequent."""

    def __init__(self, alpha: float = 2.0, top: int = 3) -> None:
        self.alpha = number("data.alpha", alpha, "> 0")
        self.top = integer("data.top", top, 1, 20)
        fixed = len(PREFIX) + len(question(self.top))
        longest = [5] * (self.top + 1)  # the smallest text's coded words, at their longest
        smallest = self.counts(0, longest, 10**9)
        assert smallest is not None
        self.min_length = fixed + self.chars(smallest, longest)

    def counts(self, scale: int, lengths: list[int], budget: int) -> list[int] | None:
        """Occurrences of ranks 1, 2, ... at ``scale`` (``lengths``: of ranks 2, ...), or None
        when they need more than ``budget`` characters."""
        raw, spent = [], 0
        for r in range(1, len(lengths) + 2):
            c = int(scale / r**self.alpha)
            if c < 1 and r > self.top + 2:
                break
            raw.append(c)
            spent += c * (4 if r == 1 else lengths[r - 2] + 1)
            if spent > budget:
                return None
        if len(raw) < self.top + 2:  # more ranks than there are lengths
            return None
        for r in range(self.top + 2, 1, -1):  # ranks 2..top+2 strictly decreasing, last >= 1
            raw[r - 1] = max(raw[r - 1], raw[r] + 1 if r < self.top + 2 else 1)
        raw[0] = max(raw[0], raw[1])
        return raw if self.chars(raw, lengths) <= budget else None

    @staticmethod
    def chars(counts: list[int], lengths: list[int]) -> int:
        """Characters of the text with these counts, each token with its leading space."""
        return counts[0] * 4 + sum(
            c * (k + 1) for c, k in zip(counts[1:], lengths[: len(counts) - 1], strict=True)
        )

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """A shuffled Zipf text of coded words (``variant`` is unused)."""
        self.check_length(n, "smallest text and question")
        ask = question(self.top)
        budget = n - len(PREFIX) - len(ask)
        lengths = (3 + rng.binomial(2, 0.5, size=budget // 4 + self.top + 2)).tolist()
        lo, hi = 0, budget + 1  # counts(lo) fits, counts(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.counts(mid, lengths, budget) is not None else (lo, mid)
        counts = self.counts(lo, lengths, budget)
        assert counts is not None
        ranked = lengths[: len(counts) - 1]
        tail, pad = word_lengths(rng, budget - self.chars(counts, ranked), 1)
        words = pick_words(rng, ranked + tail, f"frequent_words length {n}")
        tokens = [NOISE_TOKEN] * counts[0] + words[len(ranked) :]
        for word, c in zip(words[: len(ranked)], counts[1:], strict=True):
            tokens += [word] * c
        text = "".join(" " + tokens[i] for i in rng.permutation(len(tokens)))
        return PREFIX + text + " " * pad + ask, " ".join(words[: self.top])

    def answer_length(self, n: int) -> int:
        """The top words (5 letters at most), space-separated."""
        return self.top * 6 - 1
