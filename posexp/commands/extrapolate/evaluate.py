"""`posexp eval-extrapolate`: perplexity of trained runs at lengths past their training length.

For every run (one run dir, or every job of a sweep dir) and every method × length × protocol it
scores the TEST split and writes, under ``<run>/eval/``:

* ``extrapolate.json`` / ``.csv``: one record per method × length × protocol with ``method,
  length, protocol, factor, ppl, loss, tokens, seconds, note`` (plus ``stride``); ``ppl`` is
  null and ``note`` says why when a combination cannot be evaluated (a learned table too short);
* ``extrapolate.png``: ppl against length (log-x), one line per method, one panel per protocol;
* ``per_position.json`` / ``.png``: mean loss by token position (bucketed) at the longest length;

and TensorBoard scalars ``extrapolate/<protocol>/<method>/ppl`` with the length as the step.

Protocols (both score the same first ``tokens`` targets of the test split at every length):

* ``nonoverlap``: consecutive windows of L tokens; every target in a window is scored;
* ``sliding``: windows of L tokens advanced by ``stride`` S; the first window scores all its
  targets, later ones only their last S, so each token is scored once with L-S..L-1 tokens of
  context (Press et al. 2022). With S = L the two protocols are identical.

Methods are RoPE context extensions (``posexp.extension``) applied at evaluation time with
factor ``length / training length`` (or a fixed ``--factor``); a fine-tuned run also gets its
baked-in method as ``baked:<method>``, with the factor it was fine-tuned with.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posexp import flex
from posexp.commands.extrapolate.outputs import print_table, write_outputs
from posexp.commands.extrapolate.plan import (
    PER_POSITION_BUCKETS,
    RunPlan,
    RunResult,
    Settings,
    attach_examples,
    attach_windows,
    find_runs,
    plan_run,
)
from posexp.commands.extrapolate.score import (
    bucket_positions,
    out_of_table_note,
    safe_exp,
    score_windows,
)
from posexp.config import RunConfig
from posexp.data import build_tokenizer
from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.model import GPT
from posexp.objectives.synthetic import score_examples
from posexp.pe import PositionOutOfRange
from posexp.positions import scoring_positions
from posexp.rundir import RunDir
from posexp.runtime.build import Data, build_data, data_key
from posexp.runtime.device import resolve_device
from posexp.runtime.precision import autocast as precision_autocast
from posexp.runtime.precision import recorded_precision

# ---- running -------------------------------------------------------------------------------


def load_test_tokens(cfg: RunConfig, cache: dict[str, Data]) -> np.ndarray:
    """The test split of a run's data, loaded once per data/tokenizer config."""
    key = data_key(cfg)
    if key not in cache:
        cache[key] = build_data(cfg)
    tokens = cache[key].tokens
    if "test" not in tokens:
        raise PosexpError(f"the run's data has no test split (splits: {', '.join(tokens)})")
    return tokens["test"]


def evaluate_runs(
    target: Path | str | Sequence[Path | str] | None,
    settings: Settings,
    console: Any = None,
    progress: bool | None = None,
) -> list[RunResult]:
    """Plan, score and write outputs for every run under ``target``; returns the results.

    ``progress`` None shows the bar only on a terminal (tqdm's rule), True/False force it.
    """
    from rich.console import Console

    console = console or Console()
    settings.validate()
    device = resolve_device(settings.device)
    skipped = JobFailures(console)
    runs = [run for run in find_runs(target) if skipped.has_checkpoint(run)]
    runs = lock_runs(runs, console, skipped)  # one writer per run dir: held while scoring
    try:
        results = evaluate_locked(runs, target, settings, device, console, progress, skipped)
    finally:
        for run in runs:
            run.unlock()
    skipped.raise_if_any(len(results))
    return results


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
        self.console.print(f"{path}: skipped: {reason}", soft_wrap=True, highlight=False)

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


def lock_runs(runs: list[RunDir], console: Any, skipped: JobFailures | None = None) -> list[RunDir]:
    """The runs this process now locks, skipping (with a line) those another process writes.

    A run still training is written by its trainer: a sweep's evaluation goes on without it, an
    evaluation of that run alone is refused in one line.
    """
    locked, refused = [], []
    for run in runs:
        try:
            locked.append(run.lock("--run"))
        except PosexpError as e:
            refused.append(str(e))
            if len(runs) > 1 and skipped is not None:
                skipped.skip(run.path, str(e))
            elif len(runs) > 1:
                console.print(f"{run.path}: skipped: {e}", soft_wrap=True, highlight=False)
    if not locked:
        if skipped is not None and skipped.reasons and not refused:
            raise PosexpError(skipped.reasons[0])
        raise PosexpError(refused[0] if refused else "no run to evaluate")
    return locked


def evaluate_locked(
    runs: list[RunDir],
    target: Any,
    settings: Settings,
    device: torch.device,
    console: Any,
    progress: bool | None,
    skipped: JobFailures,
) -> list[RunResult]:
    """``evaluate_runs`` once this process holds every run's lock."""
    from tqdm import tqdm

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
            )
    plans = [plan for plan in plans if plan.items]
    if not plans:
        if skipped.reasons:
            raise PosexpError(f"no run under {str(target)!r} could be evaluated (each named above)")
        raise PosexpError(f"no method asked for applies to any run under {str(target)!r}")
    data_cache: dict[str, Data] = {}

    def test_data(plan: RunPlan) -> tuple[RunPlan, np.ndarray | None]:
        if plan.task is not None:  # a task run: fixed test instances instead of token windows
            attach_examples(plan)
            return plan, None
        test = load_test_tokens(plan.cfg, data_cache)
        attach_windows(plan, len(test))
        return plan, test

    prepared = [
        skipped.guard(plan.run_dir, lambda plan=plan: test_data(plan), several) for plan in plans
    ]
    plans, tests = [p for p, _ in filter(None, prepared)], [t for _, t in filter(None, prepared)]
    total = sum(item.work for plan in plans for item in plan.items)
    results = []
    with tqdm(
        total=total,
        desc="eval-extrapolate",
        unit="tok",
        unit_scale=True,
        disable=None if progress is None else not progress,
        dynamic_ncols=True,
    ) as bar:
        for plan, test in zip(plans, tests, strict=True):
            result = skipped.guard(
                plan.run_dir,
                lambda plan=plan, test=test: evaluate_plan(
                    plan, test, device, settings.batch_tokens, bar
                ),
                several,
            )
            if result is not None:
                results.append(result)
    for result in results:
        print_table(result, console, several=len(results) > 1)
    return results


def evaluate_plan(
    plan: RunPlan,
    test: np.ndarray | None,
    device: torch.device,
    batch_tokens: int,
    bar: Any,
) -> RunResult:
    """Score every item of one run, then write its JSON, CSV, plots and TensorBoard scalars."""
    # The model is measured in the arithmetic it trained in; each record says which.
    precision = recorded_precision(plan.meta, device)
    autocast = precision_autocast(precision, device)
    tokens = (
        None
        if test is None
        else torch.from_numpy(np.asarray(test[: plan.n_tokens + 1]).astype(np.int64))
    )
    tokenizer = (
        build_tokenizer(
            plan.cfg.tokenizer.name, None, Path(plan.cfg.cache_dir), **plan.cfg.tokenizer.params
        )
        if plan.task is not None
        else None
    )
    loaded: tuple[ExtensionConfig, GPT] | None = None  # one model alive at a time
    records: list[dict[str, Any]] = []
    longest = plan.longest
    curves: dict[str, dict[str, Any]] = {}
    scored = [0]  # tokens scored so far (tqdm leaves bar.n at 0 when the bar is disabled)

    def advance(n: int) -> None:
        scored[0] += n
        bar.update(n)

    for item in plan.items:
        record = {
            "method": item.method,
            "length": item.length,
            "protocol": item.protocol,
            "factor": item.factor,
            "ppl": None,
            "loss": None,
            "tokens": 0,
            "seconds": 0.0,
            "compile_seconds": None,
            "note": item.note,
            "stride": item.stride,
            "metric": item.metric,
            "accuracy": None,
            "examples": None,
            "depth": item.depth,
            "precision": precision,
        }
        if not item.skip:
            start, done, compiling = time.perf_counter(), scored[0], flex.compile_seconds()
            try:
                if loaded is None or loaded[0] != item.extension:
                    loaded = None  # free the previous model first: they differ only in frequencies
                    loaded = item.extension, plan.run.load_model(device, item.extension)
                model = loaded[1]
                if item.examples is not None:
                    task_score = score_examples(
                        model,
                        item.examples,
                        tokenizer,
                        device,
                        batch_tokens,
                        autocast,
                        advance,
                        scoring_positions(plan.cfg.positions),
                    )
                else:
                    score = score_windows(
                        model, tokens, item.windows, device, batch_tokens, autocast, advance
                    )
            except PositionOutOfRange as e:
                advance(item.work - (scored[0] - done))
                note = out_of_table_note(e)
                record["note"] = "; ".join(x for x in (item.note, note) if x)
            else:
                if item.examples is not None:
                    record.update(
                        loss=task_score.loss,
                        ppl=safe_exp(task_score.loss),
                        tokens=task_score.tokens,
                        accuracy=task_score.accuracy,
                        examples=task_score.rows,
                    )
                else:
                    record.update(loss=score.loss, ppl=safe_exp(score.loss), tokens=score.count)
                if (
                    item.examples is None
                    and item.length == longest
                    and (item.method not in curves or item.protocol == "nonoverlap")
                ):
                    curves[item.method] = bucket_positions(score, item.protocol)
            # A FlexAttention compile inside this item is the compiler's time, not the length's.
            compiled = flex.compile_seconds() - compiling
            record["seconds"] = round(time.perf_counter() - start - compiled, 3)
            record["compile_seconds"] = round(compiled, 3) if compiled else None
            if bar.disable:  # no terminal (nohup, Slurm): a plain line per item instead of the bar
                shown = (
                    record["note"]
                    if record["ppl"] is None
                    else f"accuracy {record['accuracy']:.3f}"
                    if item.examples is not None
                    else f"ppl {record['ppl']:.2f}"
                )
                where = item.protocol if item.depth is None else f"key depth {item.depth:g}"
                print(
                    f"{plan.run_dir.name}: {item.method} at {item.length:,} ({where}): "
                    f"{shown}  [{record['seconds']:.1f}s, {scored[0]:,}/{bar.total:,} tokens]",
                    file=sys.stderr,
                    flush=True,
                )
        records.append(record)
    per_position = {
        "length": longest,
        "train_length": plan.train_length,
        "buckets": PER_POSITION_BUCKETS,
        "methods": curves,
    }
    files = write_outputs(plan, records, per_position)
    return RunResult(plan.run_dir, plan.pe, plan.train_length, records, per_position, files)
