"""variable_tracking: RULER's variable tracking, shrunk for byte-level tiny models.

A chain assigns a random value to a variable, then each of ``hops`` more variables the one
before it; ``chains`` chains in all (the later ones distractors, with other values and names)
have their statements at random places in n characters of RULER's noise sentences, each chain
in its own order. The question asks for the first chain's value; the answer is its names in the
order they appear::

    <noise> VAR QKD = 4817. <noise> VAR BFA = VAR QKD. <noise> VAR ZUL = VAR BFA. <noise>
    Find all variables assigned the value 4817. Answer: <sep> QKD BFA ZUL <eos>

Sizes (defaults: 3 hops, 1 chain, 3-letter names, 4-digit values): a 16-character assignment,
three 19-character copies and the 52-character question, so min_length = 125; the answer is 4
names and 3 spaces, 15 characters. There are no depth variants.
"""

from __future__ import annotations

import itertools
import string

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.haystack import RulerTask, compose, noise, strings
from posexp.errors import PosexpError


def question(value: str) -> str:
    """The question that ends the prompt."""
    return f" Find all variables assigned the value {value}. Answer:"


def chain(names: list[str], value: str) -> list[str]:
    """The statements of one chain: an assignment, then one copy per later name."""
    first = [f" VAR {names[0]} = {value}."]
    return first + [f" VAR {b} = VAR {a}." for a, b in itertools.pairwise(names)]


@register_task("variable_tracking")
class VariableTracking(RulerTask):
    """Chains of assignments in noise; the answer is the names holding the asked value."""

    def __init__(
        self, hops: int = 3, chains: int = 1, name_letters: int = 3, value_digits: int = 4
    ) -> None:
        self.hops = integer("data.hops", hops, 1, 50)
        self.chains = integer("data.chains", chains, 1, 20)
        self.name_letters = integer("data.name_letters", name_letters, 1, 8)
        self.value_digits = integer("data.value_digits", value_digits, 1, 12)
        names = (self.hops + 1) * self.chains
        if names > 26**self.name_letters:
            raise PosexpError(
                f"data.name_letters={name_letters} gives fewer names than {names} "
                f"({self.chains} chains of {self.hops + 1}); allowed: more letters"
            )
        if self.chains > 10**self.value_digits:
            raise PosexpError(
                f"data.chains={chains} needs more distinct {self.value_digits}-digit values "
                f"than there are; allowed: data.chains <= {10**self.value_digits}"
            )
        value = "0" * self.value_digits
        self.statements = len("".join(chain(["A" * self.name_letters] * (self.hops + 1), value)))
        self.min_length = self.chains * self.statements + len(question(value))

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """Chains at random places in noise (``variant`` is unused)."""
        self.check_length(n, "statements and question")
        size = self.hops + 1
        names = strings(rng, size * self.chains, self.name_letters, string.ascii_uppercase)
        values = strings(rng, self.chains, self.value_digits, string.digits)
        snippets = []
        for c, value in enumerate(values):
            depths = np.sort(rng.random(size)).tolist()
            snippets += zip(depths, chain(names[c * size : (c + 1) * size], value), strict=True)
        ask = question(values[0])
        text, order = compose(noise(rng, n - self.chains * self.statements - len(ask)), snippets)
        return text + ask, " ".join(names[i] for i in order if i < size)

    def answer_length(self, n: int) -> int:
        """The first chain's names, space-separated."""
        return (self.hops + 1) * (self.name_letters + 1) - 1
