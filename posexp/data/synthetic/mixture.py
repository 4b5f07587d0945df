"""Shared piece of the task mixtures (``ruler``, ``chomsky``): one model trained on several
tasks, each scored apart. Every training row is an instance of one task of ``data.tasks`` drawn
uniformly, at the row's size or that task's smallest size if larger; evaluation scores each task
on its own fixed test instances (``parts``). ``data.task_options`` sets a task's own options.
No task is registered here.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from posexp import checks
from posexp.data.synthetic.base import Task, build_task
from posexp.errors import PosexpError


class Mixture(Task):
    """Rows of the tasks in ``tasks``, each drawn with equal probability; subclasses name the
    family (``family``) and the tasks it may draw (``allowed``)."""

    family: ClassVar[str] = ""  # in messages: "'copy' is not a <family> task"

    @classmethod
    def allowed(cls) -> list[str]:
        """The tasks the mixture may draw."""
        raise NotImplementedError

    def setup(self, tasks: Any, task_options: Any) -> None:
        """Check ``data.tasks`` and ``data.task_options`` and build the parts."""
        if isinstance(tasks, str):
            tasks = [tasks]
        if not isinstance(tasks, (list, tuple)) or not tasks:
            raise PosexpError(f"data.tasks must be a list of task names, got {tasks!r}")
        options = checks.mapping("data.task_options", task_options or {})
        for name in options:
            if name not in tasks:
                raise PosexpError(
                    f"data.task_options.{name} sets a task the mixture does not draw; "
                    f"allowed: {', '.join(tasks)}"
                )
        self._parts: dict[str, Task] = {}
        allowed = self.allowed()
        for name in tasks:
            if name not in allowed:  # an unknown name too: the mixture's tasks, not every task
                raise PosexpError(
                    f"data.tasks: {name!r} is not a {self.family} task; "
                    f"allowed: {', '.join(allowed)}"
                )
            if name in self._parts:
                raise PosexpError(f"data.tasks names {name!r} twice; allowed: each task once")
            key = f"data.task_options.{name}"
            given = checks.mapping(key, options.get(name) or {})
            self._parts[name] = build_task(name, dict(given), prefix=f"{key}.")
        # The smallest part's: a row of a smaller size than another part needs is drawn at that
        # part's own smallest size, so short, easy rows of the simple tasks stay in the mix.
        self.min_length = min(t.min_length for t in self._parts.values())
        self.widest_min = max(t.min_length for t in self._parts.values())

    @property
    def parts(self) -> dict[str, Task]:
        """The mixture's tasks by name, in the order ``data.tasks`` gives them."""
        return self._parts

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """An instance of a task drawn uniformly (at a random depth: depths are the parts'), of
        size n or that task's smallest size if larger."""
        names = list(self._parts)
        part = self._parts[names[int(rng.integers(len(names)))]]
        return part.instance(rng, max(n, part.min_length), split)

    def row_tokens(self, n: int) -> int:
        """The longest row a size-n draw can be: of any part, at n or its smallest size."""
        return max(t.row_tokens(max(n, t.min_length)) for t in self._parts.values())

    def prompt_length(self, n: int) -> int:
        """The longest prompt a size-n draw can have."""
        return max(t.prompt_length(max(n, t.min_length)) for t in self._parts.values())

    def scored_row_tokens(self, n: int) -> int:
        """The longest row of the parts scored at size ``n``: eval-extrapolate skips a part below
        its smallest size, so the rows of that size ``row_tokens`` allows for (training draws the
        part at its smallest size) are never scored there."""
        fits = [t.row_tokens(n) for t in self._parts.values() if n >= t.min_length]
        return max(fits, default=self.row_tokens(n))

    def answer_length(self, n: int) -> int:
        """The longest answer of any part."""
        return max(t.answer_length(n) for t in self._parts.values())
