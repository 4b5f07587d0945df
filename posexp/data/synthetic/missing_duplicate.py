"""missing_duplicate (Delétang et al. 2023's "missing duplicate string"; context-sensitive): a
string written twice, ``ww``, with one symbol blanked out by ``_``; the answer is that symbol
(``ab_aba`` -> ``a``: w = ``aba``). Size n is |w|, so the prompt has 2n symbols; the other copy
always holds the blanked symbol, so every instance has one answer."""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.base import choice_string, register_task
from posexp.data.synthetic.symbols import SymbolStringTask

BLANK = "_"


@register_task("missing_duplicate")
class MissingDuplicate(SymbolStringTask):
    """``ww`` with one of its 2n symbols replaced by ``_``; the answer is the symbol replaced."""

    unit = "symbols of w"
    chance = 0.5  # one of two symbols

    def prompt_symbols(self) -> str:
        """The letters and the blank."""
        return self.alphabet + BLANK

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """A random w of n symbols, doubled, one symbol blanked at a uniform position."""
        w = choice_string(rng, self.alphabet, n)
        doubled = w + w
        at = int(rng.integers(2 * n))
        return doubled[:at] + BLANK + doubled[at + 1 :], doubled[at]

    def prompt_length(self, n: int) -> int:
        """2n symbols."""
        return 2 * n

    def answer_length(self, n: int) -> int:
        """One symbol."""
        return 1
