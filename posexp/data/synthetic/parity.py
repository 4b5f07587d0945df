"""parity: whether a bit string has an odd number of ones (``10110`` -> ``1``)."""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.base import Task, choice_string, register_task


@register_task("parity")
class Parity(Task):
    """n random bits; the answer is one bit, the count of ones mod 2."""

    unit = "bits"

    def prompt_symbols(self) -> str:
        """Bits."""
        return "01"

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """n random bits and their parity."""
        prompt = choice_string(rng, "01", n)
        return prompt, str(prompt.count("1") % 2)

    def prompt_length(self, n: int) -> int:
        """n bits."""
        return n

    def answer_length(self, n: int) -> int:
        """One bit."""
        return 1
