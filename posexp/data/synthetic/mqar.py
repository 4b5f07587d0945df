"""mqar: multi-query associative recall (Arora et al. 2024), for byte-level models.

The prompt lists n key-value pairs, then asks for the values of ``queries`` of the keys, each
asked once, in random order; the answer is those values in the order asked::

    kq3 fz7 bd3 mo1 ? bd kq  <sep> 3 3 <eos>

Keys are ``key_letters`` lowercase letters, all different; values are ``value_digits`` digits
(values may repeat, keys never do), so keys and values come from disjoint alphabets, as the
paper's. Size n counts the pairs (the unit ``pairs``); the prompt has
n (k + v) + (n - 1) + 2 + q (k + 1) characters for k key letters, v value digits and q queries.

Scored by exact match of the whole answer, not string_match_all: values are short and repeat,
so a value found anywhere in a generated text says nothing (``3`` would match any answer with a
3), and the order of the answer says which value belongs to which query. Exact match also
scores runs on randomized positions, which string_match_all's decoding refuses.
"""

from __future__ import annotations

import string

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import Task, choice_string, register_task
from posexp.data.synthetic.haystack import strings
from posexp.errors import PosexpError

ASK = " ?"


@register_task("mqar")
class MQAR(Task):
    """n key-value pairs, then ``queries`` distinct keys; the answer is their values."""

    unit = "pairs"

    def __init__(self, queries: int = 4, key_letters: int = 2, value_digits: int = 1) -> None:
        self.queries = integer("data.queries", queries, 1, 64)
        self.key_letters = integer("data.key_letters", key_letters, 1, 4)
        self.value_digits = integer("data.value_digits", value_digits, 1, 8)
        self.min_length = self.queries  # each query asks a different key of the pairs
        self.max_pairs = 26**self.key_letters

    def prompt_symbols(self) -> str:
        """Letters, digits, the space and the question mark."""
        return string.ascii_lowercase + string.digits + " ?"

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """n pairs with distinct random keys and random values, then the queries."""
        if n > self.max_pairs:
            raise PosexpError(
                f"mqar size {n} needs {n} distinct {self.key_letters}-letter keys, more than "
                f"there are; allowed: sizes <= {self.max_pairs} or a larger data.key_letters"
            )
        keys = strings(rng, n, self.key_letters)
        values = [choice_string(rng, string.digits, self.value_digits) for _ in range(n)]
        asked = rng.choice(n, size=self.queries, replace=False)
        pairs = " ".join(k + v for k, v in zip(keys, values, strict=True))
        prompt = pairs + ASK + "".join(f" {keys[i]}" for i in asked)
        return prompt, " ".join(values[i] for i in asked)

    def prompt_length(self, n: int) -> int:
        """The pairs with spaces between, the question mark, then the queries."""
        pair = self.key_letters + self.value_digits
        return n * pair + (n - 1) + len(ASK) + self.queries * (self.key_letters + 1)

    def answer_length(self, n: int) -> int:
        """The asked values, space-separated."""
        return self.queries * (self.value_digits + 1) - 1
