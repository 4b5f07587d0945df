"""ruler: a mixture of RULER-style tasks (Hsieh et al. 2024), trained together, scored apart.

Every training row is an instance of one task of ``data.tasks`` drawn uniformly; evaluation
scores each task on its own fixed test instances (``parts``), at every test size and, for the
needle tasks, every needle depth. ``data.task_options`` sets a task's own options::

    posexp train data=ruler 'data.tasks=[niah_single,variable_tracking]' \\
        'data.task_options={niah_single: {value_digits: 5}}'

Sizes are prompt lengths in tokens, as for each task alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posexp import checks
from posexp.data.synthetic.base import TASKS, Task, build_task, register_task
from posexp.errors import PosexpError

DEFAULT_TASKS = (
    "niah_single",
    "niah_multikey",
    "niah_multivalue",
    "niah_multiquery",
    "variable_tracking",
    "common_words",
    "frequent_words",
)


def ruler_tasks() -> list[str]:
    """The tasks a mixture may draw: every RULER task (scored by string_match_all) but itself."""
    return [n for n, c in TASKS.items() if c.scorer == "string_match_all" and n != "ruler"]


@register_task("ruler")
class RulerMixture(Task):
    """Rows of the tasks in ``tasks``, each drawn with equal probability."""

    unit = "tokens"
    report_view = "ruler"
    scorer = "string_match_all"

    def __init__(
        self, tasks: Any = DEFAULT_TASKS, task_options: Any = None, threshold: float = 0.9
    ) -> None:
        # Read by the report only: the effective length's threshold, as a fraction of the best
        # model's task average at the training length (posexp/commands/report/views/ruler.py).
        self.threshold = checks.number("data.threshold", threshold, "in (0, 1]")
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
        allowed = ruler_tasks()
        for name in tasks:
            if name not in allowed:  # an unknown name too: the mixture's tasks, not every task
                raise PosexpError(
                    f"data.tasks: {name!r} is not a RULER task; allowed: {', '.join(allowed)}"
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

    def prompt_length(self, n: int) -> int:
        """n tokens, or the largest smallest size of the parts (what a row of size n can be)."""
        return max(n, self.widest_min)

    def scored_row_tokens(self, n: int) -> int:
        """The longest row of the parts scored at size ``n``: eval-extrapolate skips a part below
        its smallest size, so the rows of that size ``row_tokens`` allows for (training draws the
        part at its smallest size) are never scored there."""
        fits = [t.row_tokens(n) for t in self._parts.values() if n >= t.min_length]
        return max(fits, default=self.row_tokens(n))

    def answer_length(self, n: int) -> int:
        """The longest answer of any part."""
        return max(t.answer_length(n) for t in self._parts.values())

    def items(self, answer: str) -> list[str]:
        """Space-separated items, as every part's."""
        return answer.split(" ")
