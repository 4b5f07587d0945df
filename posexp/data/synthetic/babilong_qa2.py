"""babilong_qa2: two supporting facts (bAbI task 2 in KJV filler; posexp/data/synthetic/babilong.py).
Agents move, take and drop objects; the question asks where an object is: where its holder
went last, or where it was dropped::

    <filler> Julie grabbed the milk. <filler> Julie travelled to the hallway. <filler>
    Where is the milk? Answer: <sep> hallway <eos>
"""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.babilong import OBJECTS, BabiTask, World, pick
from posexp.data.synthetic.base import register_task


def question(obj: str) -> str:
    """The question about ``obj``."""
    return f" Where is the {obj}? Answer:"


@register_task("babilong_qa2")
class BabiQA2(BabiTask):
    """``facts`` moves, takes and drops; the answer is where an object taken at least once is."""

    carry = 0.4
    longest_question = max(len(question(o)) for o in OBJECTS)

    def __init__(self, facts: int = 4) -> None:
        super().__init__(facts)

    def fewest_facts(self) -> int:
        """A move, then a take."""
        return 2

    def ask(self, rng: np.random.Generator, world: World) -> tuple[list[str], str, str] | None:
        """Where is a random object that has been taken (None if none has)."""
        if not world.place:
            return None
        obj = pick(rng, sorted(world.place))
        return world.facts, question(obj), world.place[obj]
