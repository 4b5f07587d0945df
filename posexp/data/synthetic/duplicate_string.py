"""duplicate_string (Delétang et al. 2023; context-sensitive): write the prompt twice (``abb`` ->
``abbabb``). Size n is the prompt's symbols; the answer has 2n."""

from __future__ import annotations

from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.symbols import SymbolStringTask


@register_task("duplicate_string")
class DuplicateString(SymbolStringTask):
    """n symbols of a two-letter alphabet; the answer is them twice over."""

    def answer(self, prompt: str) -> str:
        """The prompt, then the prompt again."""
        return prompt + prompt

    def answer_length(self, n: int) -> int:
        """2n symbols."""
        return 2 * n
