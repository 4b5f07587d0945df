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

from posexp import checks
from posexp.data.synthetic.base import TASKS, register_task
from posexp.data.synthetic.mixture import Mixture

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
class RulerMixture(Mixture):
    """Rows of the RULER tasks in ``tasks``, each drawn with equal probability."""

    unit = "tokens"
    report_view = "ruler"
    scorer = "string_match_all"
    family = "RULER"

    def __init__(
        self, tasks: Any = DEFAULT_TASKS, task_options: Any = None, threshold: float = 0.9
    ) -> None:
        # Read by the report only: the effective length's threshold, as a fraction of the best
        # model's task average at the training length (posexp/commands/report/views/ruler.py).
        self.threshold = checks.number("data.threshold", threshold, "in (0, 1]")
        self.setup(tasks, task_options)

    @classmethod
    def allowed(cls) -> list[str]:
        """Every RULER task (scored by string_match_all) but the mixture itself."""
        return ruler_tasks()

    def prompt_length(self, n: int) -> int:
        """n tokens, or the largest smallest size of the parts (what a row of size n can be)."""
        return max(n, self.widest_min)

    def row_tokens(self, n: int) -> int:
        """Tokens of the longest row of size ``n``: prompt, sep, the longest answer."""
        return self.prompt_length(n) + 1 + self.answer_length(n)

    def items(self, answer: str) -> list[str]:
        """Space-separated items, as every part's."""
        return answer.split(" ")
