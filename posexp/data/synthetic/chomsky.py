"""chomsky: the Chomsky-hierarchy tasks (Delétang et al. 2023; Ruoss et al. 2023) as one mixture,
trained together and scored apart, so one run per encoding covers the set::

    posexp train data=chomsky
    posexp train data=chomsky 'data.tasks=[duplicate_string,odd_first]'
    posexp train data=chomsky 'data.task_options={binary_addition: {order: msb}}'

Sizes are each task's own unit (symbols of the string, bits, characters of the expression; the
task modules say which), so a row of size n is of different lengths for different tasks; every
part is scored by exact match of its greedy answer.

Alone, several tasks share prompts: ``abba`` is a duplicate_string prompt and an odd_first one,
with other answers, and ``1+1`` both a binary and a modular sum. In the mixture each part's
prompt therefore starts with the part's tag, one capital letter no task writes (``Dabba``:
duplicate it; ``Oabba``: odd positions first), in training and scoring alike, so every prompt
names its task and has one answer; a prompt is one character longer than the task's alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posexp.data.synthetic.base import Task, register_task
from posexp.data.synthetic.mixture import Mixture

# Regular tasks (parity, the paper's modular arithmetic without brackets) are left out: parity is
# its own task here, and none of the set's was chosen for a finite-state solution.
CHOMSKY_TASKS = (
    "modular_arithmetic",
    "stack_manipulation",
    "duplicate_string",
    "missing_duplicate",
    "odd_first",
    "binary_addition",
    "bucket_sort",
    "interlocked_pairing",
)


# Each part's tag: a capital letter none of the tasks writes (stack_manipulation pushes with A, B).
TAGS = {
    "modular_arithmetic": "M",
    "stack_manipulation": "S",
    "duplicate_string": "D",
    "missing_duplicate": "G",
    "odd_first": "O",
    "binary_addition": "P",
    "bucket_sort": "K",
    "interlocked_pairing": "I",
}


class Tagged(Task):
    """A task whose prompts start with ``tag``: a part of the mixture, named in its prompts."""

    def __init__(self, task: Task, tag: str) -> None:
        self.task, self.tag = task, tag
        self.name, self.unit, self.min_length = task.name, task.unit, task.min_length

    def prompt_symbols(self) -> str | None:
        """The task's symbols and the tag."""
        symbols = self.task.prompt_symbols()
        return None if symbols is None else self.tag + symbols

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """The task's instance, its prompt after the tag."""
        prompt, answer = self.task.instance(rng, n, split, variant)
        return self.tag + prompt, answer

    def prompt_length(self, n: int) -> int:
        """The tag and the task's prompt."""
        return 1 + self.task.prompt_length(n)

    def answer_length(self, n: int) -> int:
        """The task's."""
        return self.task.answer_length(n)


@register_task("chomsky")
class ChomskyMixture(Mixture):
    """Rows of the Chomsky-hierarchy tasks in ``tasks``, each drawn with equal probability."""

    unit = "symbols"
    family = "Chomsky-hierarchy"

    def __init__(self, tasks: Any = CHOMSKY_TASKS, task_options: Any = None) -> None:
        self.setup(tasks, task_options)
        self._parts = {name: Tagged(t, TAGS[name]) for name, t in self._parts.items()}

    @classmethod
    def allowed(cls) -> list[str]:
        """The tasks of the set."""
        return list(CHOMSKY_TASKS)
