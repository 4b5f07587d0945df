"""interlocked_pairing: recognize cross-serial ("interlocked") pairs, the dependency that makes a
language context-sensitive (Shieber 1985). The prompt is u over {a, b} then v over {c, d}, both n
symbols; the answer is ``1`` when v pairs with u position by position (a with c, b with d) and
``0`` otherwise (``abbcdd`` -> ``1``, ``abbcdc`` -> ``0``). Dependencies cross (u's first symbol
pairs with v's first), unlike nested brackets, where the first pairs with the last.

The name is the issue's; no paper's task of this name was found, so this is the closest
well-posed version: recognition of {u h(u)} with h(a) = c, h(b) = d. Half the instances (by a
fair coin) are in the language; the others differ from it at exactly one position of v, so no
answer can be read off a count or a prefix: every pair must be checked.
"""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.base import Task, choice_string, register_task

PAIR = {"a": "c", "b": "d"}


@register_task("interlocked_pairing")
class InterlockedPairing(Task):
    """u (n symbols of a, b) then v (n of c, d); the answer says whether v = h(u)."""

    unit = "symbols of u"
    chance = 0.5  # yes or no

    def prompt_symbols(self) -> str:
        """The four letters."""
        return "abcd"

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """A random u, its image v, and with probability 1/2 one symbol of v flipped."""
        u = choice_string(rng, "ab", n)
        v = [PAIR[c] for c in u]
        paired = bool(rng.integers(2))
        if not paired:
            at = int(rng.integers(n))
            v[at] = "d" if v[at] == "c" else "c"
        return u + "".join(v), "1" if paired else "0"

    def prompt_length(self, n: int) -> int:
        """2n symbols."""
        return 2 * n

    def answer_length(self, n: int) -> int:
        """One bit."""
        return 1
