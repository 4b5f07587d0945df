"""`posexp eval-extrapolate` on synthetic-task runs: accuracy per test size, method and depth.

A task run is scored on ``data.test_examples`` fixed test instances per size (``data.test_lengths``,
or ``--lengths`` in the task's unit), and per key depth for passkey. A method's factor follows
the row's token count over the longest training row, as lengths in tokens do for text runs.
Records carry ``metric: accuracy`` with ``accuracy`` (exact match), ``loss`` and ``ppl`` of the
answer tokens, ``examples`` and ``depth``.
"""

from __future__ import annotations

from typing import Any

from posexp.config import RunConfig

PROTOCOL = "exact_match"


def task_data(cfg: RunConfig) -> Any:
    """The run's synthetic task (``SyntheticData``), or None for text runs."""
    if cfg.data.name != "synthetic":
        return None
    from posexp.data.synthetic import make_data

    return make_data(**cfg.data.params)
