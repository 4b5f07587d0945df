"""`posexp eval-extrapolate` on synthetic-task runs: accuracy per test size, method and depth.

A task run is scored on ``data.test_examples`` fixed test instances per size (``data.test_lengths``,
or ``--lengths`` in the task's unit), and per key depth for passkey. A method's factor follows
the row's token count over the longest training row, as lengths in tokens do for text runs.
Records carry ``metric: accuracy`` with ``accuracy`` (exact match), ``loss`` and ``ppl`` of the
answer tokens, ``examples`` and ``depth``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posexp.config import RunConfig
from posexp.errors import PosexpError


def task_data(cfg: RunConfig) -> Any:
    """The run's synthetic task (``SyntheticData``), or None for text runs."""
    if cfg.data.name != "synthetic":
        return None
    from posexp.data.synthetic import make_data

    return make_data(**cfg.data.params)


def task_variants(
    task: Any, depths: list[float] | None, run_dir: Path, own: tuple[float, ...] | None = None
) -> tuple[Any, ...]:
    """What each size is scored at: ``depths`` (--depths), else the task's own key depths
    (``own``: a mixture part's); ``(None,)`` for runs whose instances have none."""
    variants = own if own is not None else tuple(task.task.variants or ()) if task else ()
    if depths is None:
        return variants or (None,)
    if not variants:
        if own is not None and any(p.variants for p in task.task.parts.values()):
            return (None,)  # a part without depths, beside parts with them
        what = "a language-model" if task is None else f"a {task.task.name} task"
        raise PosexpError(
            f"--depths {','.join(f'{d:g}' for d in depths)} sets where a key sits in the "
            f"filler, and {str(run_dir)!r} is {what} run; allowed: --depths only for a task "
            f"with key depths (data=passkey)"
        )
    return tuple(depths)
