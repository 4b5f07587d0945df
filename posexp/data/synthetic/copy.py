"""copy: repeat the prompt's symbols in order (``dbca`` -> ``dbca``)."""

from __future__ import annotations

import string

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import Task, choice_string, register_task


@register_task("copy")
class Copy(Task):
    """The answer is the prompt: n symbols from an alphabet of ``symbols`` letters."""

    def __init__(self, symbols: int = 10) -> None:
        self.alphabet = string.ascii_lowercase[: integer("data.symbols", symbols, 2, 26)]

    def answer(self, prompt: str) -> str:
        """The answer to ``prompt``."""
        return prompt

    def prompt_symbols(self) -> str:
        """The task's letters."""
        return self.alphabet

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """n random symbols and their answer."""
        prompt = choice_string(rng, self.alphabet, n)
        return prompt, self.answer(prompt)

    def prompt_length(self, n: int) -> int:
        """n symbols."""
        return n

    def answer_length(self, n: int) -> int:
        """n symbols."""
        return n
