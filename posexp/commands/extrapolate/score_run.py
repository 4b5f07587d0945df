"""Scoring one run: the cells of its plan still to score, merged into the records it keeps.

``evaluate_plan`` loads the run's model once per extension, scores each cell with its scorer
(``posexp/scoring``), then, under the run's eval lock, reads the kept records again (another
evaluation may have merged meanwhile), adds the new ones and writes every output from the union.
"""

from __future__ import annotations

import datetime
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posexp.commands.extrapolate.outputs import write_outputs
from posexp.commands.extrapolate.plan import RunPlan, RunResult
from posexp.config import RunConfig
from posexp.data import build_tokenizer
from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.kernels import flex
from posexp.model import GPT
from posexp.pe import PositionOutOfRange
from posexp.positions.randomized import scoring_positions
from posexp.runtime import weights
from posexp.runtime.build import Data, build_data, data_key
from posexp.runtime.kernel_choice import evaluation_kernels
from posexp.runtime.precision import autocast as precision_autocast
from posexp.runtime.stops import held, interruptible
from posexp.scoring import Scoring
from posexp.scoring.records import Record, load, merged, merging
from posexp.scoring.text import TestSplit


def load_test_tokens(
    cfg: RunConfig, cache: dict[str, Data], tokenizer_file: Path | None = None
) -> TestSplit:
    """The test split of a run's data (its tokens and document starts), in the tokenizer the
    run kept (``tokenizer_file``) where it kept one, loaded once per data/tokenizer config."""
    kept = tokenizer_file if tokenizer_file is not None and tokenizer_file.is_file() else None
    key = data_key(cfg)
    if kept is not None:
        key += hashlib.blake2b(kept.read_bytes(), digest_size=8).hexdigest()
    if key not in cache:
        cache[key] = build_data(cfg, kept)
    tokens = cache[key].tokens
    if "test" not in tokens:
        raise PosexpError(f"the run's data has no test split (splits: {', '.join(tokens)})")
    starts = getattr(tokens, "starts", {}).get("test")
    return TestSplit(tokens["test"], np.zeros(1, np.int64) if starts is None else starts)


def evaluate_plan(
    plan: RunPlan,
    test: TestSplit | None,
    device: torch.device,
    batch_tokens: int,
    bar: Any,
) -> RunResult:
    """Score the cells still to score of one run, then merge them into its kept records and
    write its JSON, CSV, plots and TensorBoard scalars. Stopped part way (Ctrl-C, SIGTERM: a
    Slurm time limit), the cells already scored are kept first, so a rerun scores only the rest."""
    new: list[Record] = []
    try:
        score_cells(plan, plan.todo, test, device, batch_tokens, bar, into=new)
        return write_merged(plan, new)  # a stop there comes once the files are written
    except KeyboardInterrupt:
        if new:
            keep_before_stop(plan, new)
        raise


def keep_before_stop(plan: RunPlan, records: list[Record]) -> None:
    """The cells of a run scored before a stop, merged into its kept records, and said (in
    worker processes too: each worker sends every cell back as it finishes it)."""
    write_merged(plan, records)
    left = len(plan.todo) - len(records)
    rest = f"rerun the command to score the other {left}" if left else "none is left to score"
    print(
        f"{plan.run_dir}: kept the {len(records)} cell(s) scored before the stop; {rest}",
        file=sys.stderr,
        flush=True,
    )


def score_cells(
    plan: RunPlan,
    items: list[Any],
    test: TestSplit | None,
    device: torch.device,
    batch_tokens: int,
    bar: Any,
    into: list[Record] | None = None,
) -> list[Record]:
    """The records of ``items`` (cells of ``plan`` whose work is cut), scored in turn (each also
    appended to ``into`` as it is done); the model is loaded once per extension and measured in
    the arithmetic it trained in."""
    new: list[Record] = [] if into is None else into
    if not items:
        return new
    precision = items[0].record.precision
    scored = [0]  # tokens scored so far (tqdm leaves bar.n at 0 when the bar is disabled)

    def advance(n: int) -> None:
        scored[0] += n
        bar.update(n)

    task = plan.task is not None
    # The targets every cell reads: the first n_tokens, and the documents' windows past them.
    reach = max([plan.n_tokens + 1, *(i.work.reach for i in items if i.work is not None)])
    scoring = Scoring(
        device,
        batch_tokens,
        precision_autocast(precision, device),
        advance,
        tokens=None
        if test is None
        else torch.from_numpy(np.asarray(test.tokens[:reach]).astype(np.int64)),
        tokenizer=build_tokenizer(
            plan.cfg.tokenizer.name, None, Path(plan.cfg.cache_dir), **plan.cfg.tokenizer.params
        )
        if task
        else None,
        positions=scoring_positions(plan.cfg.positions) if task else None,
    )
    loaded: tuple[ExtensionConfig, GPT] | None = None  # one model alive at a time
    for item in items:
        record, work = item.record, item.work
        record.scored_at = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
        if work.note:  # nothing to score (the test split is too short for one window)
            record.values = dict.fromkeys(item.scorer.fields)
            record.note = "; ".join(x for x in (record.note, work.note) if x)
            new.append(record)
            bar.cell_done()
            continue
        start, done, compiling = time.perf_counter(), scored[0], flex.compile_seconds()
        try:
            if loaded is None or loaded[0] != item.extension:
                loaded = None  # free the previous model first: they differ only in frequencies
                kernels = evaluation_kernels(plan.run.meta())
                loaded = (
                    item.extension,
                    weights.load_model(plan.run, device, item.extension, kernels),
                )
            record.values = interruptible(item.scorer.score, loaded[1], work, scoring)
        except PositionOutOfRange as e:
            advance(work.size - (scored[0] - done))
            record.values = dict.fromkeys(item.scorer.fields)
            record.note = "; ".join(x for x in (record.note, f"not applicable: {e.reason}") if x)
        # A FlexAttention compile inside this cell is the compiler's time, not the length's.
        compiled = flex.compile_seconds() - compiling
        record.seconds = round(time.perf_counter() - start - compiled, 3)
        record.compile_seconds = round(compiled, 3) if compiled else None
        new.append(record)
        bar.cell_done()
        if bar.disable:  # no terminal (nohup, Slurm): a plain line per cell instead of the bar
            print_line(plan, item, scored[0] - done, bar)
    return new


def write_merged(plan: RunPlan, new: list[Record]) -> RunResult:
    """``new`` merged into the run's kept records under its eval lock (another evaluation may
    have merged meanwhile: they are read again there), and every output written from the union.
    A stop waits for the files (cut inside an import, e.g. matplotlib's, it would leave the
    module half imported, and the write of the cells kept at the stop would fail on it)."""
    with held(), merging(plan.run):
        stored = load(plan.run, plan.checkpoint, force=plan.force)
        records = plan.with_copies(merged(stored, new))
        files = write_outputs(plan, records, stored.stale, stored.damaged)
    return RunResult(
        plan.run_dir,
        plan.pe,
        plan.train_length,
        [r.view() for r in records],
        files,
        scored=len(new),
        seq_len=plan.own_length,
    )


def print_line(plan: RunPlan, item: Any, tokens: int, bar: Any) -> None:
    """One cell's result as a plain line on stderr (when no progress bar is shown): its own
    time and tokens, then where the whole evaluation is (in this process: a worker knows only
    its own cells)."""
    record, metric = item.record, item.scorer.metric
    value = record.values.get(metric.name)
    shown = record.note if value is None else f"{metric.name} {metric.format(value)}"
    where = record.protocol if record.depth is None else f"key depth {record.depth:g}"
    if record.task is not None:
        where = f"{record.task}, {where}"
    summary = getattr(bar, "summary", None)
    overall = f"; {summary()}" if summary else ""
    print(
        f"{plan.run_dir.name}: {record.label} at {record.length:,} ({where}): "
        f"{shown}  [{record.seconds:.1f}s, {tokens:,} tokens{overall}]",
        file=sys.stderr,
        flush=True,
    )
