"""reverse: the prompt's symbols in reverse order (``dbca`` -> ``acbd``)."""

from __future__ import annotations

from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.copy import Copy


@register_task("reverse")
class Reverse(Copy):
    """Copy's prompts; the answer reads them backwards."""

    def answer(self, prompt: str) -> str:
        """The prompt reversed."""
        return prompt[::-1]
