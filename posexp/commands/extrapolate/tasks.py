"""`posexp eval-extrapolate` on synthetic-task runs: accuracy per test size, method and depth.

A task run is scored on ``data.test_examples`` fixed test instances per size (``data.test_lengths``,
or ``--lengths`` in the task's unit), and per key depth for passkey and the needle tasks; a
mixture scores each of its tasks apart, at the sizes it takes. A method's factor follows
the row's token count over the longest training row, as lengths in tokens do for text runs.
A mixture's row at a size below one task's smallest counts that smallest size (``row_tokens``:
what a training row can be), though that task is skipped there; the factor is still that of
the tasks scored: a RULER answer's length does not vary with the size, and training draws every
task at its smallest size at least, so such a row is no longer than the longest training row,
and s = max(1, tokens / L0) is 1, as it is for the shorter rows actually scored. From the
largest smallest size on, every task is scored and the row is the longest of theirs.
Records carry ``metric: accuracy`` with ``accuracy`` (exact match), ``loss`` and ``ppl`` of the
answer tokens, ``examples`` and ``depth``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from posexp.config import RunConfig
from posexp.errors import PosexpError

log = logging.getLogger("posexp")


def task_data(cfg: RunConfig) -> Any:
    """The run's synthetic task (``SyntheticData``), or None for text runs."""
    if cfg.data.name != "synthetic":
        return None
    from posexp.data.synthetic import make_data

    return make_data(**cfg.data.params)


def depth_tasks() -> list[str]:
    """The tasks with key depths (a ``data.depths`` option): the runs --depths applies to."""
    from posexp import checks
    from posexp.data.synthetic import TASKS

    return [
        name
        for name, cls in TASKS.items()
        if "depths" in checks.keyword_params(cls.__init__, skip=("self",))
    ]


def refuse_depths(depths: list[float], task: Any, run_dir: Path) -> None:
    """The one line for --depths on a run without key depths (any kind of run: one message)."""
    what = "a language-model run" if task is None else f"a {task.task.name} task run"
    if task is not None and task.task.parts:
        what = f"a {task.task.name} run of {', '.join(task.task.parts)}"
    raise PosexpError(
        f"--depths {','.join(f'{d:g}' for d in depths)} sets where a key sits in the filler, "
        f"and {str(run_dir)!r} is {what} (no key depths); allowed: --depths only for runs of a "
        f"task with key depths ({', '.join(depth_tasks())}) or a ruler mixture drawing one"
    )


def task_parts(
    task: Any, depths: list[float] | None, run_dir: Path
) -> list[tuple[str | None, tuple[Any, ...], int]]:
    """What is scored apart: (mixture part or None, the key depths each size is scored at,
    the smallest size it takes). Depths are ``depths`` (--depths) where the task has its own
    (``data.depths``), else those; ``(None,)`` for tasks and runs without any."""
    tasks: dict[str | None, Any] = {None: None}  # a language model: one part, no depths
    if task is not None:
        tasks = dict(task.task.parts) or {None: task.task}
    if depths is not None and not any(t is not None and t.variants for t in tasks.values()):
        refuse_depths(depths, task, run_dir)
    out = []
    for name, t in tasks.items():
        own = tuple(t.variants) if t is not None else ()
        # A mixture's part without depths, beside parts with them, is scored once per size.
        variants = (tuple(depths) if depths is not None and own else own) or (None,)
        out.append((name, variants, t.min_length if t is not None else 1))
    return out


def say_skipped_parts(
    run_dir: Path, parts: list[tuple[str | None, tuple[Any, ...], int]], lengths: list[int]
) -> None:
    """One line naming the mixture's tasks some lengths are too short for (those fitting are
    scored; the others are left out there, not the whole evaluation)."""
    skipped = [
        f"{name} at {', '.join(f'{n:,}' for n in short)} (needs >= {smallest:,})"
        for name, _, smallest in parts
        if (short := [n for n in lengths if n < smallest])
    ]
    if skipped:
        log.warning(
            "%s: skipping the tasks a length is too short for: %s", run_dir.name, "; ".join(skipped)
        )
