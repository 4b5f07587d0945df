"""addition: the sum of two n-digit numbers (``47+85`` -> ``132``).

Both operands have exactly n digits (no leading zero unless n = 1). The sum is written most
significant digit first, as ordinary numbers are and as Kazemnejad et al. (2023) write it;
``answer_order: lsb`` writes it least significant digit first instead (the order in which a
carry is computed, which makes each answer digit depend only on digits already written).
``operand_order: lsb`` writes both operands least significant digit first too (``74+58`` for
47 + 85), as McLeish et al. (2024) do: the k-th digit of each operand and of a reversed answer
then share a place value, so the digits an answer digit needs sit at one fixed offset.
"""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.base import Task, register_task
from posexp.errors import choose

ORDERS = ("msb", "lsb")


@register_task("addition")
class Addition(Task):
    """``a+b`` with n-digit a and b; the answer is a + b (n or n + 1 digits)."""

    unit = "digits"
    numeric = True

    def __init__(self, answer_order: str = "msb", operand_order: str = "msb") -> None:
        choose("data.answer_order", answer_order, ORDERS)
        choose("data.operand_order", operand_order, ORDERS)
        self.answer_order = answer_order
        self.operand_order = operand_order

    def prompt_symbols(self) -> str:
        """Digits and the plus sign."""
        return "0123456789+"

    def number(self, rng: np.random.Generator, n: int) -> int:
        """A uniform n-digit number (digit by digit, so any n works)."""
        digits = rng.integers(0, 10, size=n)
        if n > 1 and digits[0] == 0:
            digits[0] = rng.integers(1, 10)
        return int("".join(map(str, digits)))

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """Two n-digit numbers and their sum."""
        a, b = self.number(rng, n), self.number(rng, n)

        def written(value: int, order: str) -> str:
            return str(value) if order == "msb" else str(value)[::-1]

        prompt = f"{written(a, self.operand_order)}+{written(b, self.operand_order)}"
        return prompt, written(a + b, self.answer_order)

    def prompt_length(self, n: int) -> int:
        """Two n-digit numbers and a plus sign."""
        return 2 * n + 1

    def answer_length(self, n: int) -> int:
        """Up to n + 1 digits."""
        return n + 1
