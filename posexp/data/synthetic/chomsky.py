"""chomsky: the Chomsky-hierarchy tasks (Delétang et al. 2023; Ruoss et al. 2023) as one mixture,
trained together and scored apart, so one run per encoding covers the set::

    posexp train data=chomsky
    posexp train data=chomsky 'data.tasks=[duplicate_string,odd_first]'
    posexp train data=chomsky 'data.task_options={binary_addition: {order: msb}}'

Sizes are each task's own unit (symbols of the string, bits, characters of the expression; the
task modules say which), so a row of size n is of different lengths for different tasks; every
part is scored by exact match of its greedy answer.
"""

from __future__ import annotations

from typing import Any

from posexp.data.synthetic.base import register_task
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


@register_task("chomsky")
class ChomskyMixture(Mixture):
    """Rows of the Chomsky-hierarchy tasks in ``tasks``, each drawn with equal probability."""

    unit = "symbols"
    family = "Chomsky-hierarchy"

    def __init__(self, tasks: Any = CHOMSKY_TASKS, task_options: Any = None) -> None:
        self.setup(tasks, task_options)

    @classmethod
    def allowed(cls) -> list[str]:
        """The tasks of the set."""
        return list(CHOMSKY_TASKS)
