"""Shared piece of the tasks whose prompt is n random symbols and whose answer is a function of
it: copy, reverse and sort, and the Chomsky-hierarchy string tasks (Delétang et al. 2023; Ruoss
et al. 2023; two letters by default, as the papers' binary strings). No task is registered here."""

from __future__ import annotations

import string

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import Task, choice_string


class SymbolStringTask(Task):
    """n random symbols of ``symbols`` letters; subclasses give ``answer`` and its length."""

    def __init__(self, symbols: int = 2) -> None:
        self.alphabet = string.ascii_lowercase[: integer("data.symbols", symbols, 2, 26)]

    def answer(self, prompt: str) -> str:
        """The answer to ``prompt``."""
        raise NotImplementedError

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
