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

import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

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
from posexp.model import GPT, ModelConfig
from posexp.objectives.synthetic import score_examples
from posexp.pe import PositionOutOfRange
from posexp.runtime.build import Data, build_data, data_key
from posexp.runtime.device import resolve_device

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


def evaluate_runs(target: Path | str | Sequence[Path | str] | None, settings: Settings,
                  console: Any = None, progress: bool | None = None) -> list[RunResult]:
    """Plan, score and write outputs for every run under ``target``; returns the results.

    ``progress`` None shows the bar only on a terminal (tqdm's rule), True/False force it.
    """
    from rich.console import Console
    from tqdm import tqdm

    console = console or Console()
    settings.validate()
    device = resolve_device(settings.device)
    runs = find_runs(target)
    plans = [plan_run(run, settings, len(runs)) for run in runs]  # all checks first
    for plan in plans:
        if plan.dropped:
            console.print(f"{plan.run_dir}: skipping {', '.join(plan.dropped)} "
                          f"(not applicable to pe={plan.pe})", soft_wrap=True, highlight=False)
    plans = [plan for plan in plans if plan.items]
    if not plans:
        raise PosexpError(f"no method asked for applies to any run under {str(target)!r}")
    data_cache: dict[str, Data] = {}
    tests = []
    for plan in plans:
        if plan.task is not None:  # a task run: fixed test instances instead of token windows
            attach_examples(plan)
            tests.append(None)
            continue
        test = load_test_tokens(plan.cfg, data_cache)
        attach_windows(plan, len(test))
        tests.append(test)
    autocast = ((lambda: torch.autocast("cuda", dtype=torch.bfloat16))
                if device.type == "cuda" else contextlib.nullcontext)
    total = sum(item.work for plan in plans for item in plan.items)
    results = []
    with tqdm(total=total, desc="eval-extrapolate", unit="tok", unit_scale=True,
              disable=None if progress is None else not progress, dynamic_ncols=True) as bar:
        for plan, test in zip(plans, tests, strict=True):
            results.append(evaluate_plan(plan, test, device, settings.batch_tokens, autocast, bar))
    for result in results:
        print_table(result, console, several=len(results) > 1)
    return results


def evaluate_plan(plan: RunPlan, test: np.ndarray | None, device: torch.device, batch_tokens: int,
                  autocast: Callable[[], Any], bar: Any) -> RunResult:
    """Score every item of one run, then write its JSON, CSV, plots and TensorBoard scalars."""
    mdict = dict(plan.meta["model"])
    state = plan.run.load_model(torch.device("cpu")).state_dict()
    tokens = None if test is None else torch.from_numpy(np.asarray(test[: plan.n_tokens + 1]).astype(np.int64))
    tokenizer = build_tokenizer(plan.cfg.tokenizer.name, None, Path(plan.cfg.cache_dir),
                                **plan.cfg.tokenizer.params) if plan.task is not None else None
    models: dict[str, GPT] = {}
    records: list[dict[str, Any]] = []
    longest = plan.longest
    curves: dict[str, dict[str, Any]] = {}
    scored = [0]  # tokens scored so far (tqdm leaves bar.n at 0 when the bar is disabled)

    def advance(n: int) -> None:
        scored[0] += n
        bar.update(n)

    for item in plan.items:
        record = {"method": item.method, "length": item.length, "protocol": item.protocol,
                  "factor": item.factor, "ppl": None, "loss": None, "tokens": 0, "seconds": 0.0,
                  "note": item.note, "stride": item.stride, "metric": item.metric,
                  "accuracy": None, "examples": None, "depth": item.depth}
        if not item.skip:
            key = json.dumps(item.extension, sort_keys=True)
            start, done = time.perf_counter(), scored[0]
            try:
                if key not in models:
                    models.clear()  # one model alive at a time: they differ only in frequencies
                    model = GPT(ModelConfig(**{**mdict, "extension": item.extension}))
                    model.load_state_dict(state)
                    models[key] = model.to(device).eval()
                if item.examples is not None:
                    task_score = score_examples(models[key], item.examples, tokenizer, device,
                                                batch_tokens, autocast, advance)
                else:
                    score = score_windows(models[key], tokens, item.windows, device, batch_tokens,
                                          autocast, advance)
            except PositionOutOfRange:
                advance(item.work - (scored[0] - done))
                record["note"] = "; ".join(x for x in (item.note, out_of_table_note(mdict)) if x)
            else:
                if item.examples is not None:
                    record.update(loss=task_score.loss, ppl=safe_exp(task_score.loss),
                                  tokens=task_score.tokens, accuracy=task_score.accuracy,
                                  examples=task_score.rows)
                else:
                    record.update(loss=score.loss, ppl=safe_exp(score.loss), tokens=score.count)
                if item.examples is None and item.length == longest and (item.method not in curves
                                               or item.protocol == "nonoverlap"):
                    curves[item.method] = bucket_positions(score, item.protocol)
            record["seconds"] = round(time.perf_counter() - start, 3)
            if bar.disable:  # no terminal (nohup, Slurm): a plain line per item instead of the bar
                shown = (record["note"] if record["ppl"] is None else f"accuracy {record['accuracy']:.3f}"
                         if item.examples is not None else f"ppl {record['ppl']:.4g}")
                where = item.protocol if item.depth is None else f"key depth {item.depth:g}"
                print(f"{plan.run_dir.name}: {item.method} at {item.length:,} ({where}): "
                      f"{shown}  [{record['seconds']:.1f}s, {scored[0]:,}/{bar.total:,} tokens]",
                      file=sys.stderr, flush=True)
        records.append(record)
    per_position = {"length": longest, "train_length": plan.train_length,
                    "buckets": PER_POSITION_BUCKETS, "methods": curves}
    files = write_outputs(plan, records, per_position)
    return RunResult(plan.run_dir, plan.pe, plan.train_length, records, per_position, files)


