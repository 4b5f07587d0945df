"""Shared pieces of the RULER tasks (Hsieh et al. 2024), shrunk for byte-level tiny models.

A RULER task's size n is its prompt's length in characters (byte tokens), exactly. Haystacks are
RULER's noise (five short sentences repeated, from a random one) or King James Bible text of the
instance's split (as passkey's filler); neither has a digit. ``compose`` puts snippets (needles,
statements) into a haystack at the clause boundary (a space after ``.,;:!?``) nearest each
snippet's depth, 0 the start and 1 the end. Keys are lowercase letters, values digits; the word
tasks draw from ``vocabulary()``: 4,800 made-up consonant-vowel words of 3-5 letters from a fixed
seed. Every answer is items joined by single spaces (RULER's string_match_all scores each item).
No task is registered here.
"""

from __future__ import annotations

import functools
import re
import string
from typing import Any, ClassVar

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import Task, choice_string, depth_list
from posexp.errors import PosexpError, choose

NOISE = (
    " The grass is green.",
    " The sky is blue.",
    " The sun is yellow.",
    " Here we go.",
    " There and back again.",
)
HAYSTACKS = ("noise", "kjv")
BOUNDARY = re.compile(r"[.,;:!?] ")
CONSONANTS, VOWELS = "bcdfghjklmnprstvwz", "aeiou"
WORDS_PER_LENGTH = {3: 1200, 4: 2400, 5: 1200}  # lengths drawn 1:2:1 (3 + Binomial(2, 1/2))
VOCABULARY_SEED = 20240406


def noise(rng: np.random.Generator, length: int) -> str:
    """``length`` characters of RULER's noise sentences, starting at a random sentence."""
    start = int(rng.integers(len(NOISE)))
    cycle = "".join(NOISE[start:] + NOISE[:start])
    return (cycle * (length // len(cycle) + 1))[:length]


@functools.cache
def kjv_text(split: str) -> str:
    """The KJV text of ``split`` as one ASCII string without digits (loaded once)."""
    from posexp.data.registry import load_corpus

    text = " ".join(load_corpus("kjv").splits[split]).encode("ascii", "replace").decode("ascii")
    return re.sub(r"\d", "", text)


def kjv(rng: np.random.Generator, length: int, split: str) -> str:
    """``length`` characters of KJV text of ``split``, from a random sentence start."""
    text = kjv_text(split)
    while len(text) < length + 2000:
        text = f"{text} {text}"
    start = int(rng.integers(0, len(text) - length - 1000))
    found = text.find(". ", start, start + 1000)
    start = start if found < 0 else found + 1
    return text[start : start + length]


def haystack(kind: str, rng: np.random.Generator, length: int, split: str) -> str:
    """``length`` characters of the ``kind`` haystack (noise or kjv)."""
    return noise(rng, length) if kind == "noise" else kjv(rng, length, split)


def compose(filler: str, snippets: list[tuple[float, str]]) -> tuple[str, list[int]]:
    """``filler`` with each (depth, text) snippet at the boundary nearest its depth, and the
    snippets' indices in the order they appear (snippets at one boundary keep their order)."""
    cuts = np.array([0, *(m.end() - 1 for m in BOUNDARY.finditer(filler)), len(filler)])
    spots = []
    for i, (depth, _) in enumerate(snippets):
        target = depth * len(filler)
        j = int(np.searchsorted(cuts, target))
        near = min(cuts[max(j - 1, 0) : j + 1], key=lambda c: abs(c - target))
        spots.append((int(near), i))
    spots.sort()
    parts, last = [], 0
    for at, i in spots:
        parts += [filler[last:at], snippets[i][1]]
        last = at
    parts.append(filler[last:])
    return "".join(parts), [i for _, i in spots]


def strings(
    rng: np.random.Generator,
    count: int,
    size: int,
    alphabet: str = string.ascii_lowercase,
    exclude: set[str] | frozenset[str] = frozenset(),
) -> list[str]:
    """``count`` distinct random strings of ``size`` symbols of ``alphabet``, none in ``exclude``."""
    out: dict[str, None] = {}
    while len(out) < count:
        s = choice_string(rng, alphabet, size)
        if s not in exclude:
            out[s] = None
    return list(out)


@functools.cache
def vocabulary() -> dict[int, tuple[str, ...]]:
    """The synthetic words by length: consonant-vowel alternations from a fixed seed."""
    rng = np.random.default_rng(VOCABULARY_SEED)
    out = {}
    for size, count in WORDS_PER_LENGTH.items():
        words: dict[str, None] = {}
        while len(words) < count:
            letters = [CONSONANTS if k % 2 == 0 else VOWELS for k in range(size)]
            words["".join(a[int(rng.integers(len(a)))] for a in letters)] = None
        out[size] = tuple(words)
    return out


def word_lengths(rng: np.random.Generator, chars: int, repeats: int = 1) -> tuple[list[int], int]:
    """Random lengths (3-5) of words that, each written ``repeats`` times as `` word``, fill
    ``chars`` characters, and the characters left over (fewer than ``4 * repeats``)."""
    units, pad = divmod(chars, repeats)
    while units in (1, 2, 3, 7):  # no sum of 4s, 5s and 6s
        units, pad = units - 1, pad + repeats
    if units == 0:
        return [], pad
    m = min(max(round(units / 5), -(-units // 6)), units // 4)
    slots = rng.choice(2 * m, size=units - 4 * m, replace=False)  # 0-2 extra letters each
    return (3 + np.bincount(slots % m, minlength=m)).tolist(), pad


def pick_words(rng: np.random.Generator, lengths: list[int], what: str) -> list[str]:
    """Distinct random vocabulary words of the given lengths (``what`` names the task)."""
    out = [""] * len(lengths)
    for size, pool in vocabulary().items():
        where = [i for i, k in enumerate(lengths) if k == size]
        if len(where) > len(pool):
            raise PosexpError(
                f"{what} needs {len(where)} distinct {size}-letter words, more than the "
                f"vocabulary's {len(pool)}; allowed: shorter lengths"
            )
        for i, j in zip(where, rng.choice(len(pool), size=len(where), replace=False), strict=True):
            out[i] = pool[j]
    return out


class RulerTask(Task):
    """A RULER task: size n is the prompt's characters; answers are space-separated items."""

    unit = "tokens"
    scorer = "string_match_all"
    report_view = "ruler"

    def items(self, answer: str) -> list[str]:
        """The answer's items (values, names or words; none contains a space)."""
        return answer.split(" ")

    def prompt_length(self, n: int) -> int:
        """n characters, haystack and question together."""
        return n

    def check_length(self, n: int, what: str) -> None:
        """Refuse a length below ``min_length`` (``what``: the parts that must fit)."""
        if n < self.min_length:
            raise PosexpError(
                f"{self.name} length {n} is shorter than its {what}; "
                f"allowed: lengths >= {self.min_length}"
            )


def needle(key: str, value: str) -> str:
    """The sentence that states ``key``'s magic number."""
    return f" The magic number for {key} is {value}."


class NeedleTask(RulerTask):
    """A needle-in-a-haystack task: options and draws shared by the niah_* tasks."""

    haystacks: ClassVar[tuple[str, ...]] = HAYSTACKS

    def setup(self, key_letters: int, value_digits: int, depths: Any, haystack: str) -> None:
        """Check and keep the shared options."""
        self.key_letters = integer("data.key_letters", key_letters, 1, 8)
        self.value_digits = integer("data.value_digits", value_digits, 1, 12)
        self.variants = depth_list(depths)
        choose("data.haystack", haystack, self.haystacks)
        self.haystack = haystack
        self.needle_length = len(needle("a" * self.key_letters, "0" * self.value_digits))

    def keys(self, rng: np.random.Generator, count: int, exclude: Any = frozenset()) -> list[str]:
        """``count`` distinct random keys, none in ``exclude``."""
        return strings(rng, count, self.key_letters, exclude=exclude)

    def values(self, rng: np.random.Generator, count: int, distinct: bool = False) -> list[str]:
        """``count`` random values (all different with ``distinct``)."""
        if distinct:
            return strings(rng, count, self.value_digits, string.digits)
        return [choice_string(rng, string.digits, self.value_digits) for _ in range(count)]

    def filler(self, rng: np.random.Generator, length: int, split: str, keys: Any) -> str:
        """``length`` characters of haystack (``keys``: those a needle haystack must avoid)."""
        return haystack(self.haystack, rng, length, split)
