"""odd_first (Delétang et al. 2023's "odds first"; context-sensitive): the symbols at odd
positions (1st, 3rd, ...), then those at even positions (``abcde`` -> ``acebd``)."""

from __future__ import annotations

from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.symbols import SymbolStringTask


@register_task("odd_first")
class OddFirst(SymbolStringTask):
    """n symbols; the answer is a permutation of them: odd positions first, then even ones."""

    def answer(self, prompt: str) -> str:
        """Positions 1, 3, 5, ... then 2, 4, ... (counting from 1)."""
        return prompt[0::2] + prompt[1::2]

    def answer_length(self, n: int) -> int:
        """n symbols."""
        return n
