"""babilong_qa1: one supporting fact (bAbI task 1 in KJV filler; posexp/data/synthetic/babilong.py).
Agents move about; the question asks where one of them is, answered by its last move::

    <filler> Fred went to the garden. <filler> Fred moved to the office. <filler>
    Where is Fred? Answer: <sep> office <eos>
"""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.babilong import AGENTS, BabiTask, World, pick
from posexp.data.synthetic.base import register_task


def question(agent: str) -> str:
    """The question about ``agent``."""
    return f" Where is {agent}? Answer:"


@register_task("babilong_qa1")
class BabiQA1(BabiTask):
    """``facts`` moves; the answer is where an agent that moved last went."""

    longest_question = max(len(question(a)) for a in AGENTS)

    def ask(self, rng: np.random.Generator, world: World) -> tuple[list[str], str, str] | None:
        """Where is a random agent that has moved."""
        agent = pick(rng, sorted(world.where))
        return world.facts, question(agent), world.where[agent]
