"""Shared pieces of the BABILong-style tasks (Kuratov et al. 2024; bAbI tasks 1-3 of Weston et
al. 2015) for byte-level models: short stories about agents moving and carrying objects,
their sentences scattered in order through King James Bible text of the instance's split, and a
question at the end that needs one, two or three of them. No task is registered here.

A story's sentences are facts of three kinds (each verb drawn from a few synonyms)::

    Sandra went to the kitchen.      Fred picked up the apple.      Fred dropped the apple.

Agents are names that never occur in the KJV (the filler cannot state a fact); an object taken
is where its holder is, moves with the holder, and stays where it is dropped. A fact is never a
no-op: an agent moves to a place other than its own, takes only an object no one holds that is
where the agent is (or has not been placed yet), and drops only what it holds.

Size n is the prompt's characters (byte tokens), exactly: filler, facts and question together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posexp.checks import integer
from posexp.data.synthetic.base import Task
from posexp.data.synthetic.haystack import compose, kjv
from posexp.errors import PosexpError

AGENTS = ("Sandra", "Fred", "Julie", "Emily")
LOCATIONS = ("kitchen", "bathroom", "hallway", "bedroom", "garden", "office")
OBJECTS = ("apple", "football", "milk")
MOVES = ("went to", "moved to", "journeyed to", "travelled to")
TAKES = ("picked up", "grabbed", "got")
DROPS = ("dropped", "put down", "discarded")
STORY_TRIES = 1000  # stories drawn until one has a question of the task's kind


def pick(rng: np.random.Generator, options: Any) -> Any:
    """One of ``options``, uniformly."""
    options = list(options)
    return options[int(rng.integers(len(options)))]


@dataclass
class World:
    """The state a story's facts have built: where agents and objects are, who holds what, and
    each object's trail (the places it has been, in order, no place twice in a row)."""

    where: dict[str, str] = field(default_factory=dict)
    holder: dict[str, str] = field(default_factory=dict)
    place: dict[str, str] = field(default_factory=dict)
    trail: dict[str, list[str]] = field(default_factory=dict)
    facts: list[str] = field(default_factory=list)

    def arrive(self, obj: str, loc: str) -> None:
        """Put ``obj`` at ``loc``, extending its trail."""
        self.place[obj] = loc
        path = self.trail.setdefault(obj, [])
        if not path or path[-1] != loc:
            path.append(loc)

    def move(self, rng: np.random.Generator, agent: str) -> None:
        """``agent`` goes to a random place other than its own, with what it holds."""
        loc = pick(rng, (x for x in LOCATIONS if x != self.where.get(agent)))
        self.where[agent] = loc
        for obj, who in self.holder.items():
            if who == agent:
                self.arrive(obj, loc)
        self.facts.append(f" {agent} {pick(rng, MOVES)} the {loc}.")

    def takes(self) -> list[tuple[str, str]]:
        """The (agent, object) takes allowed now."""
        return [
            (a, o)
            for a in AGENTS
            if a in self.where
            for o in OBJECTS
            if o not in self.holder and self.place.get(o, self.where[a]) == self.where[a]
        ]

    def take(self, rng: np.random.Generator, agent: str, obj: str) -> None:
        """``agent`` takes ``obj`` where it stands."""
        self.holder[obj] = agent
        self.arrive(obj, self.where[agent])
        self.facts.append(f" {agent} {pick(rng, TAKES)} the {obj}.")

    def drop(self, rng: np.random.Generator, obj: str) -> None:
        """``obj``'s holder drops it."""
        agent = self.holder.pop(obj)
        self.facts.append(f" {agent} {pick(rng, DROPS)} the {obj}.")

    def act(self, rng: np.random.Generator, carry: float) -> None:
        """One random fact: a take or a drop with probability ``carry`` (when one is allowed),
        else a move of a random agent (an agent holding something, when any does, half the
        time: stories in which objects travel)."""
        takes, held = self.takes(), sorted(self.holder)
        if rng.random() < carry and (takes or held):
            kinds = (["take"] if takes else []) + (["drop"] if held else [])
            if pick(rng, kinds) == "take":
                self.take(rng, *pick(rng, takes))
            else:
                self.drop(rng, pick(rng, held))
            return
        carriers = sorted(set(self.holder.values()))
        agent = pick(rng, carriers) if carriers and rng.random() < 0.5 else pick(rng, AGENTS)
        self.move(rng, agent)


def longest(*parts: tuple[str, ...]) -> int:
    """Characters of the longest fact built from one word of each of ``parts``."""
    return sum(max(map(len, p)) for p in parts)


# " <agent> <verb> the <place or object>."
LONGEST_FACT = 1 + longest(AGENTS) + 1 + longest(MOVES + TAKES + DROPS) + 5 + 1
LONGEST_FACT += max(len(x) for x in LOCATIONS + OBJECTS)


class BabiTask(Task):
    """A BABILong-style task: ``facts`` facts in KJV filler and one question; the answer is a
    place. Subclasses draw a story (``story``) and say how long a question can be."""

    unit = "tokens"
    carry = 0.0  # the chance a fact is a take or drop (0: only moves)
    longest_question = 0

    def __init__(self, facts: int = 4) -> None:
        self.facts = integer("data.facts", facts, self.fewest_facts(), 64)
        self.min_length = self.facts * LONGEST_FACT + self.longest_question

    def fewest_facts(self) -> int:
        """The fewest facts a story with a question of this kind can have."""
        return 1

    def story(self, rng: np.random.Generator) -> tuple[list[str], str, str] | None:
        """(facts, question, answer), or None when the story asks nothing of this kind."""
        world = World()
        for _ in range(self.facts):
            world.act(rng, self.carry)
        return self.ask(rng, world)

    def ask(self, rng: np.random.Generator, world: World) -> tuple[list[str], str, str] | None:
        """The question and answer on ``world`` (None if it has none of this kind)."""
        raise NotImplementedError

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """A story's facts in order at random depths of KJV filler, then its question."""
        if n < self.min_length:
            raise PosexpError(
                f"{self.name} length {n} is shorter than its facts and question; "
                f"allowed: lengths >= {self.min_length}"
            )
        for _ in range(STORY_TRIES):
            told = self.story(rng)
            if told is not None:
                break
        else:  # pragma: no cover - each kind's stories ask something far more often than this
            raise PosexpError(f"{self.name}: no story with a question in {STORY_TRIES} draws")
        facts, question, answer = told
        room = n - sum(map(len, facts)) - len(question)
        depths = np.sort(rng.random(len(facts))).tolist()
        text, _ = compose(kjv(rng, room, split), list(zip(depths, facts, strict=True)))
        return text + question, answer

    def prompt_length(self, n: int) -> int:
        """n characters."""
        return n

    def answer_length(self, n: int) -> int:
        """The longest place name."""
        return max(map(len, LOCATIONS))
