"""sort: the prompt's symbols in alphabetical order (``dbca`` -> ``abcd``)."""

from __future__ import annotations

from posexp.data.synthetic.base import register_task
from posexp.data.synthetic.copy import Copy


@register_task("sort")
class Sort(Copy):
    """Copy's prompts; the answer is them sorted (repeats kept)."""

    def answer(self, prompt: str) -> str:
        """The prompt's symbols sorted."""
        return "".join(sorted(prompt))
