"""modular_arithmetic (Delétang et al. 2023's "modular arithmetic (brackets)"; deterministic
context-free): an expression over the digits 0-4 with ``+``, ``-``, ``*``, unary minus and
brackets; the answer is its value mod 5, one digit (``(3-4)*2`` -> ``3``: -2 mod 5).

Size n is the expression's characters, exactly. Expressions follow the usual precedence (as
Python reads them), drawn from the grammar::

    expr   := term | expr (+|-) term
    term   := factor | factor * term
    factor := digit | -digit | (expr) | -(expr)

A minus sign directly before a digit or a bracket is unary, so every n >= 1 has expressions
(n = 2: ``-3``); the paper's generator has only binary operators inside brackets. Splits are
uniform over the places a sub-expression can end, so nesting stays shallow.
"""

from __future__ import annotations

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import Task, register_task
from posexp.errors import PosexpError

# Nesting grows with the size (about one bracket per 7 characters at 2,000); past this the
# recursive draw would near Python's recursion limit.
MAX_LENGTH = 2048


@register_task("modular_arithmetic")
class ModularArithmetic(Task):
    """An n-character expression over digits below ``modulus``; the answer is its value mod it."""

    unit = "characters"
    chance = 0.2  # a residue mod 5

    def __init__(self, modulus: int = 5) -> None:
        self.modulus = integer("data.modulus", modulus, 2, 10)

    def prompt_symbols(self) -> str:
        """The digits below the modulus, the operators and brackets."""
        return "0123456789"[: self.modulus] + "+-*()"

    def digit(self, rng: np.random.Generator) -> tuple[str, int]:
        """A random digit and its value."""
        d = int(rng.integers(self.modulus))
        return str(d), d

    def factor(self, rng: np.random.Generator, n: int) -> tuple[str, int]:
        """A factor of exactly n characters and its value mod the modulus."""
        if n == 1:
            return self.digit(rng)
        if n == 2:
            text, value = self.digit(rng)
            return "-" + text, -value % self.modulus
        minus = n >= 4 and bool(rng.integers(2))
        text, value = self.expr(rng, n - 2 - minus)
        if minus:
            return f"-({text})", -value % self.modulus
        return f"({text})", value

    def term(self, rng: np.random.Generator, n: int) -> tuple[str, int]:
        """A product of exactly n characters (a lone factor at random or when n < 3)."""
        if n < 3 or rng.random() < 0.25:
            return self.factor(rng, n)
        left = int(rng.integers(1, n - 1))
        a, x = self.factor(rng, left)
        b, y = self.term(rng, n - 1 - left)
        return f"{a}*{b}", x * y % self.modulus

    def expr(self, rng: np.random.Generator, n: int) -> tuple[str, int]:
        """A sum or difference of exactly n characters (a lone term at random or when n < 3)."""
        if n < 3 or rng.random() < 0.25:
            return self.term(rng, n)
        left = int(rng.integers(1, n - 1))
        a, x = self.expr(rng, left)
        b, y = self.term(rng, n - 1 - left)
        op = "+-"[int(rng.integers(2))]
        return f"{a}{op}{b}", (x + y if op == "+" else x - y) % self.modulus

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """A random n-character expression and its value."""
        if n > MAX_LENGTH:
            raise PosexpError(
                f"modular_arithmetic size {n} is too long to draw; allowed: sizes <= {MAX_LENGTH}"
            )
        text, value = self.expr(rng, n)
        return text, str(value)

    def prompt_length(self, n: int) -> int:
        """n characters."""
        return n

    def answer_length(self, n: int) -> int:
        """One digit."""
        return 1
