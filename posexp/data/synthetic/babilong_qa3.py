"""babilong_qa3: three supporting facts (bAbI task 3 in KJV filler; posexp/data/synthetic/babilong.py).
The question asks where an object was before it was in a place; the object's trail (the places
it has been, carried) answers it. Only a place the object has been once is asked about, so the
answer is unique::

    <filler> Emily got the football. (Emily is in the bedroom) ... Emily went to the kitchen.
    ... Where was the football before the kitchen? Answer: <sep> bedroom <eos>
"""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.babilong import LOCATIONS, OBJECTS, BabiTask, World, pick
from posexp.data.synthetic.base import register_task


def question(obj: str, loc: str) -> str:
    """The question about ``obj`` before ``loc``."""
    return f" Where was the {obj} before the {loc}? Answer:"


@register_task("babilong_qa3")
class BabiQA3(BabiTask):
    """``facts`` moves, takes and drops; the answer is the place an object was in before one
    it has been in once."""

    carry = 0.4
    longest_question = max(len(question(o, x)) for o in OBJECTS for x in LOCATIONS)

    def __init__(self, facts: int = 5) -> None:
        super().__init__(facts)

    def fewest_facts(self) -> int:
        """A move, a take and a move with the object."""
        return 3

    def ask(self, rng: np.random.Generator, world: World) -> tuple[list[str], str, str] | None:
        """Before which once-visited place (not the first) of which object (None if none)."""
        asks = [
            (obj, i)
            for obj, path in sorted(world.trail.items())
            for i in range(1, len(path))
            if path.count(path[i]) == 1
        ]
        if not asks:
            return None
        obj, i = pick(rng, asks)
        path = world.trail[obj]
        return world.facts, question(obj, path[i]), path[i - 1]
