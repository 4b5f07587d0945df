"""binary_addition (Delétang et al. 2023; context-sensitive): the sum of two binary numbers
(``011+1`` -> ``111`` least significant bit first: 6 + 1 = 7).

Size n is the bits of both operands together: the first has 1 to n - 1 of them (uniformly), so
the prompt has n + 1 characters. Numbers have no leading zero (0 is ``0``). ``order: lsb``
(the default) writes operands and sum least significant bit first, the order a carry runs in;
``msb`` writes them as usual.
"""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.base import Task, register_task
from posexp.errors import choose

ORDERS = ("lsb", "msb")


@register_task("binary_addition")
class BinaryAddition(Task):
    """``x+y`` with n bits in all; the answer is x + y in binary."""

    unit = "bits"
    min_length = 2

    def __init__(self, order: str = "lsb") -> None:
        choose("data.order", order, ORDERS)
        self.order = order

    def prompt_symbols(self) -> str:
        """Bits and the plus sign."""
        return "01+"

    def written(self, value: int) -> str:
        """``value`` in binary, in the task's bit order."""
        bits = format(value, "b")
        return bits[::-1] if self.order == "lsb" else bits

    def number(self, rng: np.random.Generator, bits: int) -> int:
        """A uniform number of exactly ``bits`` bits (0 or 1 for one bit)."""
        if bits == 1:
            return int(rng.integers(2))
        rest = rng.integers(0, 2, size=bits - 1)
        return int("1" + "".join(map(str, rest)), 2)

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """Two numbers with n bits in all and their sum."""
        first = int(rng.integers(1, n))
        x, y = self.number(rng, first), self.number(rng, n - first)
        return f"{self.written(x)}+{self.written(y)}", self.written(x + y)

    def prompt_length(self, n: int) -> int:
        """n bits and the plus sign."""
        return n + 1

    def answer_length(self, n: int) -> int:
        """At most n bits (a 1-bit and an (n-1)-bit number)."""
        return n
