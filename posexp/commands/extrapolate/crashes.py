"""A worker process that dies while scoring (a crash in native code, the kernel's out-of-memory
killer): only the method it was scoring is lost, and named in one line.

A process pool breaks whole when one of its workers dies: every task still in it fails with
``BrokenProcessPool``, whoever ran it. So the cells finished so far are kept (merged into their
runs' records, as at a stop), and each method left is scored again alone, in a pool of one
worker: one that breaks that pool is the method that kills its worker, and only its cells stay
unscored.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from posexp.commands.extrapolate.plan import RunPlan, RunResult
from posexp.commands.extrapolate.score_run import write_merged
from posexp.errors import PosexpError


def how_it_ended(processes: list[Any]) -> str:
    """The workers' ends, in words: ``killed by SIGBUS``, ``exit status 1``."""
    ends = []
    for process in processes:
        code = process.exitcode
        if code is None or code == 0:
            continue
        if code < 0:
            try:
                ends.append(f"killed by {signal.Signals(-code).name}")
            except ValueError:
                ends.append(f"killed by signal {-code}")
        else:
            ends.append(f"exit status {code}")
    return ", ".join(dict.fromkeys(ends)) or "ended without a word"


def after_a_crash(
    tasks: list[tuple[RunPlan, str, int]],
    futures: dict[Future, tuple[RunPlan, str]],
    results: dict[Path, RunResult | None],
    kept: Callable[[Path], list[Any]],
    failed: set[Path],
    ended: str,
    solo: bool,
    skipped: Any,
    several: bool,
    score_alone: Callable[[tuple[RunPlan, str, int]], dict[Path, RunResult]],
) -> dict[Path, RunResult]:
    """What a broken pool leaves: the cells finished kept (``kept``: a run's records sent so
    far), the methods left scored again one by one (``score_alone``), and a method that breaks
    its own pool of one (``solo``) named as lost: skipped for one of several runs, else an
    error."""
    finished = {
        (plan.run_dir, label)
        for f, (plan, label) in futures.items()
        if f.done() and f.exception() is None
    }
    left = [task for task in tasks if (task[0].run_dir, task[1]) not in finished]
    out: dict[Path, RunResult] = {}
    for plan in {plan.run_dir: plan for plan, _, _ in tasks}.values():
        run, records = plan.run_dir, kept(plan.run_dir)
        if records and run not in results and run not in failed:
            # Merged on disk: a method scored again below adds to them.
            result = write_merged(plan, records)
            if not any(task[0] is plan for task in left):
                out[run] = result
    if solo:
        [(plan, label, _)] = left or tasks
        message = (
            f"the worker process scoring method {label} ended ({ended}); its cells not "
            f"finished are not scored (the others are kept): rerun to try them again"
        )
        if not several:
            raise PosexpError(f"{plan.run_dir}: {message}")
        failed.add(plan.run_dir)
        skipped.skip(plan.run_dir, message)
        return out
    print(
        f"a worker process ended ({ended}); the cells finished are kept, and the "
        f"{len(left)} method(s) left are scored again one at a time",
        file=sys.stderr,
        flush=True,
    )
    for task in left:
        if task[0].run_dir not in failed:
            out.update(score_alone(task))
    return out
