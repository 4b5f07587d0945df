"""bucket_sort (Delétang et al. 2023; context-sensitive): the prompt's symbols, drawn from a
small alphabet (5 letters, as the paper's), in sorted order (``dbcab`` -> ``abbcd``). The same
function as ``sort``; kept as its own task so the Chomsky set has the paper's name and alphabet."""

from __future__ import annotations

from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.symbols import SymbolStringTask


@register_task("bucket_sort")
class BucketSort(SymbolStringTask):
    """n symbols of ``symbols`` letters; the answer is them sorted (repeats kept)."""

    def __init__(self, symbols: int = 5) -> None:
        super().__init__(symbols)

    def answer(self, prompt: str) -> str:
        """The prompt's symbols sorted."""
        return "".join(sorted(prompt))

    def answer_length(self, n: int) -> int:
        """n symbols."""
        return n
