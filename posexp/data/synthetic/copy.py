"""copy: repeat the prompt's symbols in order (``dbca`` -> ``dbca``)."""

from __future__ import annotations

from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.symbols import SymbolStringTask


@register_task("copy")
class Copy(SymbolStringTask):
    """The answer is the prompt: n symbols from an alphabet of ``symbols`` letters."""

    def __init__(self, symbols: int = 10) -> None:
        super().__init__(symbols)

    def answer(self, prompt: str) -> str:
        """The answer to ``prompt``."""
        return prompt

    def answer_length(self, n: int) -> int:
        """n symbols."""
        return n
