"""`posexp eval-extrapolate`: scores of trained runs at lengths past their training length.

For every run (one run dir, or every job of a sweep dir) it plans every method spec x length x
protocol cell (``plan.py``), scores those not yet measured on the run's current weights with
their scorers (``posexp/scoring``), and merges them into the records already kept, under
``<run>/eval/``:

* ``extrapolate.json`` / ``.csv``: one record per cell (``posexp.scoring.records``), every
  evaluation's together; ``stale.json``: records of earlier weights, kept apart;
* ``extrapolate.png``: the headline metric against length, one line per method spec, one panel
  per protocol (or key depth); ``per_position.json`` / ``.png``: loss by position at the
  longest length (text runs); ``context_use_<protocol>.png``: loss or gain by position in a
  document at the longest length (``doc_position``, ``context_gain``);

and TensorBoard scalars ``extrapolate/<protocol>/<metric>`` per method with the length as the
step. The files always show every record of the current weights, written atomically.

Several runs are scored in parallel worker processes when the device is the CPU and cores
allow (``parallel.py``), one torch thread per core.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from posexp.commands.extrapolate.cost import say_cost
from posexp.commands.extrapolate.outputs import tensorboard_stale
from posexp.commands.extrapolate.parallel import score_plans
from posexp.commands.extrapolate.plan import (
    RunPlan,
    RunResult,
    Settings,
    attach_work,
    find_runs,
    needs_test_split,
    plan_run,
)
from posexp.commands.extrapolate.score_run import load_test_tokens, write_merged
from posexp.commands.extrapolate.tables import print_table
from posexp.errors import PosexpError
from posexp.runtime.build import Data
from posexp.runtime.device import resolve_device
from posexp.store.rundir import RunDir

# ---- running -------------------------------------------------------------------------------


def evaluate_runs(
    target: Path | str | Sequence[Path | str] | None,
    settings: Settings,
    console: Any = None,
    progress: bool | None = None,
    tables: bool = True,
) -> list[RunResult]:
    """Plan, score what is missing and write outputs for every run under ``target``.

    ``progress`` None shows the bar only on a terminal (tqdm's rule), True/False force it;
    ``tables`` prints each run's table of records.
    """
    from posexp.commands.console import stdout_console

    console = console or stdout_console()
    settings.validate()
    device = resolve_device(settings.device)
    skipped = JobFailures(console)
    runs = [run for run in find_runs(target) if skipped.has_checkpoint(run)]
    runs = share_runs(runs, console, skipped)  # no training run writes them while they score
    try:
        results = evaluate_shared(runs, target, settings, device, console, progress, skipped)
        if tables:
            for result in results:
                print_table(result, console, several=len(results) > 1)
    finally:
        for run in runs:
            run.unlock()
    measure_attention(results, settings, console, skipped)
    skipped.raise_if_any(len(results))
    return results


def measure_attention(
    results: list[RunResult], settings: Settings, console: Any, skipped: JobFailures
) -> None:
    """Where attention goes (``posexp attention``) for each evaluated run whose knobs ask for it
    (``--attention`` or a preset's ``extrapolate.attention``) and that is not yet measured at
    its longest evaluated length; a run that cannot be measured is named, the others go on."""
    from posexp.commands.attention import measure_run, measured_lengths

    for result in results:
        run = RunDir(result.run_dir)
        if not settings.for_run(run.config()).attention or not result.records:
            continue
        longest = max(int(r["length"]) for r in result.records)
        if longest in measured_lengths(run.path):
            continue
        skipped.guard(
            run.path,
            lambda run=run, n=longest: measure_run(
                run.path, n, device=settings.device, console=console
            ),
            several=len(results) > 1,
        )


class PartlyEvaluated(PosexpError):
    """Some runs of a sweep could not be evaluated; the others were (their outputs are written)."""


class JobFailures:
    """The runs of a sweep that are skipped, each said in a line as it happens, so one damaged or
    failed job never stops the evaluation of the others (a single run's error stays an error)."""

    def __init__(self, console: Any) -> None:
        self.console, self.reasons, self.several = console, [], False

    def has_checkpoint(self, run: RunDir) -> bool:
        """True for a run to evaluate; a failed or unfinished job without weights is named."""
        if run.has_checkpoint():
            return True
        self.skip(run.path, f"no checkpoint to evaluate (status {run.status()})")
        return False

    def skip(self, path: Path, reason: str) -> None:
        """Name a run that is not evaluated, and why."""
        self.reasons.append(f"{path}: {reason}")
        self.console.print(
            f"{path}: skipped: {reason}", soft_wrap=True, highlight=False, markup=False
        )

    def guard(self, path: Path, step: Callable[[], Any], several: bool) -> Any:
        """``step()``; for one of several runs, a user error skips that run (None) instead."""
        try:
            return step()
        except PosexpError as e:
            if not several:
                raise
            self.skip(path, str(e))
            return None

    def raise_if_any(self, evaluated: int) -> None:
        """A non-zero exit after a sweep's evaluation that skipped runs, naming how many."""
        if self.reasons:
            raise PartlyEvaluated(
                f"evaluated {evaluated} run(s); skipped {len(self.reasons)} "
                f"(each named above with its reason)"
            )


def share_runs(
    runs: list[RunDir], console: Any, skipped: JobFailures | None = None
) -> list[RunDir]:
    """The runs this process now holds shared (other evaluations may too), skipping, with a
    line, those a training run writes: a sweep's evaluation goes on without them, an evaluation
    of that run alone is refused in one line."""
    held, refused = [], []
    for run in runs:
        try:
            held.append(run.share("--run"))
        except PosexpError as e:
            refused.append(str(e))
            if len(runs) > 1 and skipped is not None:
                skipped.skip(run.path, str(e))
            elif len(runs) > 1:
                console.print(
                    f"{run.path}: skipped: {e}", soft_wrap=True, highlight=False, markup=False
                )
    if not held:
        if skipped is not None and skipped.reasons and not refused:
            n = len(skipped.reasons)
            raise PosexpError(
                skipped.reasons[0]
                if n == 1
                else f"no run to evaluate: all {n} were skipped (each named above with its reason)"
            )
        raise PosexpError(refused[0] if refused else "no run to evaluate")
    return held


def evaluate_shared(
    runs: list[RunDir],
    target: Any,
    settings: Settings,
    device: torch.device,
    console: Any,
    progress: bool | None,
    skipped: JobFailures,
) -> list[RunResult]:
    """``evaluate_runs`` once this process holds every run's lock (shared)."""
    several = len(runs) > 1 or bool(skipped.reasons)
    plans = [
        skipped.guard(run.path, lambda run=run: plan_run(run, settings, len(runs)), several)
        for run in runs
    ]  # all checks first
    plans = [plan for plan in plans if plan is not None]
    for plan in plans:
        if plan.dropped:
            console.print(
                f"{plan.run_dir}: skipping {', '.join(plan.dropped)} "
                f"(not applicable to pe={plan.pe})",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
    plans = [plan for plan in plans if plan.items]
    if not plans:
        if skipped.reasons:
            raise PosexpError(f"no run under {str(target)!r} could be evaluated (each named above)")
        raise PosexpError(f"no method asked for applies to any run under {str(target)!r}")
    done = [plan for plan in plans if not plan.todo]
    for plan in plans if len(plans) == 1 else [p for p in plans if p.todo]:
        console.print(
            f"{plan.run_dir if several else plan.run_dir.name}: {plan.progress_line()}",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
    if len(plans) > 1 and done:
        console.print(
            f"{len(done)} of {len(plans)} runs have every cell asked for measured on their "
            f"current weights ({sum(len(p.items) for p in done)} cells): nothing to score there",
            highlight=False,
            markup=False,
        )
    data_cache: dict[str, Data] = {}

    def cut(plan: RunPlan) -> RunPlan:
        if needs_test_split(plan):
            test = load_test_tokens(plan.cfg, data_cache, plan.run.tokenizer_file)
            attach_work(plan, len(test), test.starts)
        else:
            attach_work(plan)
        return plan

    todo = [plan for plan in plans if plan.todo]
    todo = [p for p in (skipped.guard(p.run_dir, lambda p=p: cut(p), several) for p in todo) if p]
    say_cost(todo, settings.batch_tokens, device, console)  # a long one is never silent
    scored = score_plans(todo, settings, device, progress, data_cache, skipped, several)
    results = [scored.get(plan.run_dir) or stored_result(plan) for plan in plans]
    return [r for r in results if r is not None]


def stored_result(plan: RunPlan) -> RunResult | None:
    """The result of a run with nothing to score: its records as they are kept."""
    if plan.todo:
        return None  # its scoring failed (named by JobFailures)
    # Cells measured under another label (kept under this one too), or outputs cut short.
    if plan.copies or tensorboard_stale(plan.run_dir):
        return write_merged(plan, [])
    records = [r.view() for r in plan.stored.current]
    return RunResult(
        plan.run_dir, plan.pe, plan.train_length, records, [], scored=0, seq_len=plan.own_length
    )
