"""Planning `posexp eval-extrapolate`: settings, and the cells to score per run.

A plan lists, for one run dir, every method spec x length x protocol (x key depth) cell as the
record it will become (``posexp.scoring.records``: its key filled, its values empty), with the
extension set up for it and the scorer that scores it (``posexp.scoring``). The cells already
measured on the run's current weights are left out (``--force`` keeps them in).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from posexp import checks
from posexp.commands.extrapolate.cells import (
    cell_extension,
    cell_of,
    check_cell_extensions,
    method_specs,
    say_capped_tokens,
    say_other_token_counts,
    say_short_lengths,
    with_copies,
)
from posexp.commands.extrapolate.tasks import say_skipped_parts, task_data, task_parts
from posexp.config import ExtrapolateConfig, RunConfig
from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.extension.spec import BAKED
from posexp.model.attention import QUERY_CHUNK
from posexp.pe import accepted_extensions, check_extension
from posexp.runtime.device import resolve_device
from posexp.runtime.hardware import available_memory
from posexp.runtime.precision import recorded_precision
from posexp.runtime.weights import saved_model_config
from posexp.scoring import TEXT, Scorer, Work, get_scorer
from posexp.scoring.records import Checkpoint, Record, Stored, checkpoint_of, load
from posexp.scoring.text import DEFAULT_BATCH_TOKENS, TextSource, check_windows_fit
from posexp.store.checkpoint import checkpoint_problem
from posexp.store.files import check_writable
from posexp.store.rundir import RunDir, latest_run
from posexp.store.rundir import find_runs as find_run_dirs

log = logging.getLogger("posexp")

DEFAULT_LEN = 4096
DEFAULT_TOKENS = 16384
DEFAULT_PROTOCOL = "nonoverlap"


# ---- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What the user asked for: the knobs a preset may also set, then where and how to run.

    ``extrapolate`` holds the options (checked when built, ``ExtrapolateConfig.from_dict`` with
    prefix ``--``); None in it means "the run's `extrapolate:` section, else the default".
    """

    extrapolate: ExtrapolateConfig = field(default_factory=ExtrapolateConfig)
    device: str = "auto"
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    force: bool = False  # rescore the cells asked for even where they are measured
    workers: int | None = None  # worker processes scoring a sweep; None: one per core
    threads: int | None = None  # torch threads (per worker); None: the cores / workers

    def validate(self) -> None:
        """Reject a bad device, batch size, worker or thread count before any run is loaded."""
        checks.positive_int("--batch-tokens", self.batch_tokens)
        checks.positive_int("--workers", self.workers, allow_none=True)
        checks.positive_int("--threads", self.threads, allow_none=True)
        resolve_device(self.device)

    def for_run(self, cfg: RunConfig) -> ExtrapolateConfig:
        """The knobs for one run: each option given, else the run's `extrapolate:` section."""
        given, preset = self.extrapolate, cfg.extrapolate
        knobs = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)}
        for key, value in knobs.items():
            if value is None:
                knobs[key] = getattr(preset, key)
        if given.len is not None or given.lengths is not None:
            # --len or --lengths replaces the preset's choice of lengths, both keys of it.
            knobs["len"], knobs["lengths"] = given.len, given.lengths
        return ExtrapolateConfig(**knobs)


# ---- planning ------------------------------------------------------------------------------


@dataclass
class Item:
    """One cell to score: the record it becomes, the extension set up for it, its scorer and,
    once the data is known, its work (windows or instances)."""

    record: Record
    extension: ExtensionConfig
    scorer: Scorer
    work: Work | None = None

    @property
    def size(self) -> int:
        """Tokens its forward passes read (0 before its work is cut, or when it cannot be)."""
        return self.work.size if self.work is not None else 0


@dataclass
class RunPlan:
    """Everything needed to evaluate one run: its cells, those still to score, where it stands."""

    run: RunDir
    meta: dict[str, Any]
    cfg: RunConfig
    train_length: int
    n_tokens: int
    items: list[Item]  # every cell asked for
    stored: Stored  # the records already kept for the run
    dropped: list[str] = field(default_factory=list)  # asked-for methods that do not apply
    task: Any = None  # a synthetic-task run's SyntheticData (then items score instances)
    force: bool = False
    baked: ExtensionConfig | None = None  # the extension a fine-tuned run was trained with

    @property
    def run_dir(self) -> Path:
        return self.run.path

    @property
    def pe(self) -> str:
        return self.meta["model"]["pe"]

    @property
    def own_length(self) -> int | None:
        """The length this run itself trained at, where that is not L0 (a fine-tune's)."""
        own = self.cfg.train.seq_len
        return own if self.task is None and own != self.train_length else None

    @property
    def longest(self) -> int:
        return max(i.record.length for i in self.items)

    @property
    def checkpoint(self) -> Checkpoint:
        return self.stored.checkpoint

    @cached_property
    def todo(self) -> list[Item]:
        """The cells to score now: those not measured on these weights (every one with force),
        each cell once: two specs whose settings are the same at this run's L0 (``self_extend``
        and ``self_extend(window=16)`` at L0 64) share it. Decided once, from the records read
        when the plan was made."""
        if self.force:
            return self.items
        seen = {cell_of(r) for r in self.stored.current}
        todo = []
        for item in self.items:
            if cell_of(item.record) not in seen:
                seen.add(cell_of(item.record))
                todo.append(item)
        return todo

    @property
    def copies(self) -> int:
        """Cells asked for under a label of their own whose value another label's record holds
        (measured, or scored now): kept under both labels, scored once."""
        measured, scored = self.stored.measured(), {id(item) for item in self.todo}
        return sum(i.record.key not in measured and id(i) not in scored for i in self.items)

    def progress_line(self) -> str:
        """How much of what was asked is measured already: '12 of 16 cells measured, scoring 4'
        (and the records of earlier weights this evaluation moves to stale.json)."""
        moved = self.stored.superseded
        line = self.cells_line()
        if moved:
            line += (
                f"; {moved} record{'s' * (moved != 1)} of earlier weights (the run trained on) "
                f"move to eval/stale.json"
            )
        return line

    def cells_line(self) -> str:
        """'12 of 16 cells measured, scoring 4', or what else stands for it."""
        todo, total, copies = len(self.todo), len(self.items), self.copies
        shared = f" ({copies} the same cell as another label's)" if copies else ""
        if self.force:
            return f"rescoring {total} cell{'s' * (total != 1)} (--force)"
        if todo == total:
            return f"scoring {total} cell{'s' * (total != 1)}"
        if not todo:
            return f"all {total} cells already measured on these weights{shared}, scoring none"
        return f"{total - todo} of {total} cells already measured{shared}, scoring {todo}"

    def with_copies(self, records: list[Record]) -> list[Record]:
        """``records`` plus, for each cell asked for under a label no record has, a copy of
        the record of the same cell under another label (``todo`` scored it once)."""
        return with_copies(self.items, records)


def find_runs(target: Path | str | Sequence[Path | str] | None) -> list[RunDir]:
    """The run dir itself, every job of a sweep dir (with or without a checkpoint), or the newest run."""
    if target is None:
        return [latest_run()]
    if isinstance(target, (list, tuple)):
        return [run for t in target for run in find_runs(t)]
    runs = find_run_dirs(target, what="--run")  # a sweep's failed jobs too: each is named
    if len(runs) == 1 and not runs[0].has_checkpoint():
        return find_run_dirs(target, need_checkpoint=True, what="--run")  # its one-line error
    return runs


def forward_bytes(length: int, batch_tokens: int, mcfg: Any) -> int:
    """About what one scoring forward pass at ``length`` holds at once (float32, no gradients):
    its logits and their log-softmax, one layer's activations, and one query block of bias per
    head (the SDPA path; FlexAttention needs less). An underestimate: it refuses only what
    cannot fit."""
    tokens = max(1, batch_tokens // length) * length
    per_token = 2 * mcfg.vocab_size + 8 * mcfg.d_model
    return 4 * (tokens * per_token + 2 * mcfg.n_heads * QUERY_CHUNK * length)


def check_fits(length: int, settings: Settings, mcfg: Any, run_dir: Path) -> None:
    """Refuse, before anything is allocated, a length whose forward pass cannot fit in memory."""
    device = resolve_device(settings.device)
    need, have = forward_bytes(length, settings.batch_tokens, mcfg), available_memory(device.type)
    if have is not None and need > have:
        raise PosexpError(
            f"length {length:,} needs about {need / 2**30:.1f} GiB for one forward pass of "
            f"{str(run_dir)!r}, and {device.type} has {have / 2**30:.1f} GiB free; allowed: "
            f"shorter --len / --lengths"
        )


def plan_lengths(knobs: ExtrapolateConfig, train_length: int, run_dir: Path) -> list[int]:
    """Explicit --lengths, else doubling from the training length up to --len (inclusive)."""
    if knobs.lengths:
        return sorted(set(knobs.lengths))
    max_len = knobs.len or DEFAULT_LEN
    if max_len < train_length:
        raise PosexpError(
            f"--len {max_len} is below the training length {train_length} of {str(run_dir)!r}; "
            f"allowed: --len >= {train_length} (or explicit --lengths)"
        )
    lengths, n = [], train_length
    while n <= max_len:
        lengths.append(n)
        n *= 2
    if lengths[-1] != max_len:
        lengths.append(max_len)
    return lengths


def unfinished_note(run: RunDir, meta: dict[str, Any], cfg: RunConfig) -> str:
    """'' for a completed run; else what its checkpoint is (a run still training, or killed)."""
    if run.status() == "completed":
        return ""
    return f"unfinished run: checkpoint at step {meta['step']} of {cfg.train.max_steps}"


def plan_run(run: RunDir, settings: Settings, n_runs: int) -> RunPlan:
    """Decide every method x length x protocol cell for one run, validating the user's choices.

    Work (windows, instances) is cut later by ``attach_work``, once the data is loaded, so bad
    options fail before any data is loaded or any model built.
    """
    run_dir = run.path
    check_writable(run_dir, "run dir")  # before any scoring, not after it
    meta = run.meta()
    if problem := checkpoint_problem(run_dir):  # before its records are judged by its hash
        raise PosexpError(f"corrupt checkpoint in {str(run_dir)!r}: {problem}")
    cfg = run.config()
    given, s = settings.extrapolate, settings.for_run(cfg)
    mcfg = saved_model_config(run)
    pe, train_length, baked = mcfg.pe, mcfg.train_length, mcfg.extension
    pe_params = dict(mcfg.pe_params)
    task = task_data(cfg)
    if task is not None:
        if given.len is not None or given.protocol is not None or given.tokens is not None:
            raise PosexpError(
                f"{str(run_dir)!r} is a {task.task.name} task run: it is scored by "
                f"test sizes; allowed: --lengths (in {task.task.unit}), --method, --factor, --depths"
            )
        lengths = sorted(set(given.lengths or task.test_lengths))
        for n in lengths:
            if n < task.task.min_length:
                raise PosexpError(
                    f"--lengths {n} is below the smallest {task.task.name} size "
                    f"{task.task.min_length}; allowed: sizes >= {task.task.min_length}"
                )
        train_length = task.longest_train_row()  # positions trained: the longest training row
        scorers = [get_scorer(task.task.scorer)]
        sample_size = task.test_examples
    else:
        lengths = plan_lengths(s, train_length, run_dir)
        scorers = [get_scorer(name) for name in (s.protocol or [DEFAULT_PROTOCOL])]
        sample_size = None  # the token count, set below
    # (mixture part or None, its depths, its smallest size): a mixture scores each task apart
    parts = task_parts(task, s.depths, run_dir)
    say_skipped_parts(run_dir, parts, lengths)
    stride = s.stride or max(1, train_length // 2)
    if s.stride and any(scorer.uses_stride for scorer in scorers):
        say_short_lengths(run_dir, stride, lengths)
    if given.tokens is not None and given.tokens < max(lengths):
        raise PosexpError(
            f"--tokens {given.tokens} is below the longest length {max(lengths)}; every length "
            f"needs at least one full window (allowed: --tokens >= {max(lengths)})"
        )
    # A preset's token count (or the default) grows to one full window at the longest length.
    n_tokens = max(s.tokens or max(DEFAULT_TOKENS, 4 * max(lengths)), max(lengths))
    if task is None:
        check_fits(max(lengths), settings, mcfg, run_dir)
        sample_size = n_tokens

    unfinished = unfinished_note(run, meta, cfg)
    if unfinished:
        log.warning("%s: %s; its records say so", run_dir, unfinished)
    precision = recorded_precision(meta, resolve_device(settings.device))
    stored = load(run, checkpoint_of(run), force=settings.force)
    specs = method_specs(s.method, pe, baked.method != "none", s.factor, pe_params)
    items: list[Item] = []
    dropped: list[str] = []
    for spec in specs:
        if spec.name == BAKED:
            if baked.method == "none":
                if n_runs > 1:
                    dropped.append(spec.label)
                    continue
                raise PosexpError(
                    f"--method baked: {str(run_dir)!r} has no baked-in extension "
                    f"(only runs made by `posexp finetune` with an extension have one)"
                )
        elif spec.name not in accepted_extensions(pe, pe_params):
            if n_runs == 1:
                check_extension(
                    pe, spec.name, pe_params
                )  # the one-line error naming what pe can take
            # A sweep mixes PEs: a method this job's PE cannot take is skipped for it.
            dropped.append(spec.label)
            continue
        for length in lengths:
            # A mixture's row_tokens counts a skipped part's smallest size, and still gives the
            # scored parts' factor: there it is <= L0, so s = 1 either way (see tasks.py).
            tokens = task.task.row_tokens(length) if task is not None else length
            ext, cell_spec, note = cell_extension(spec, baked, tokens, train_length, run_dir)
            for scorer in scorers:
                for part, depth in (
                    (p, d) for p, variants, least in parts if length >= least for d in variants
                ):
                    record = Record(
                        spec=cell_spec,
                        length=length,
                        protocol=scorer.name,
                        factor=ext.factor,
                        settings=ext.effective_params,
                        stride=min(stride, length) if scorer.uses_stride else None,
                        sample_size=sample_size,
                        depth=depth,
                        task=part,
                        precision=precision,
                        checkpoint=stored.checkpoint,
                        metric=scorer.metric.name,
                        note="; ".join(x for x in (note, unfinished) if x),
                    )
                    items.append(Item(record, ext, scorer))
    check_cell_extensions([(i.record.spec, i.extension) for i in items], mcfg, run_dir)
    if not items and n_runs == 1:
        raise PosexpError(
            f"no method to evaluate for {str(run_dir)!r} (pe={pe}); "
            f"allowed for {pe}: {', '.join(accepted_extensions(pe, pe_params))}"
        )
    plan = RunPlan(
        run, meta, cfg, train_length, n_tokens, items, stored, dropped, task, settings.force, baked
    )
    if task is None and s.tokens is None and plan.todo:
        say_other_token_counts(run_dir, stored, n_tokens, max(lengths))
    return plan


@dataclass
class RunResult:
    """The records of one run's current weights (every evaluation's), and the files written."""

    run_dir: Path
    pe: str
    train_length: int
    records: list[dict[str, Any]]
    files: list[Path]
    scored: int = 0  # cells scored by this evaluation
    seq_len: int | None = None  # the run's own training length, where it is not L0 (a fine-tune)


def attach_work(
    plan: RunPlan, test_size: int | None = None, starts: np.ndarray | None = None
) -> None:
    """Cut the work of every cell still to score: instances of a task run (a pure function of
    data.seed), windows over the test split (its token count capped to the split; ``starts``:
    where its documents begin, for the scorers that place windows at them) otherwise."""
    if plan.task is None:
        plan.n_tokens = say_capped_tokens(plan.run_dir, plan.n_tokens, test_size)
        check_windows_fit([i.record.length for i in plan.todo if i.scorer.kind == TEXT], test_size)
        source: Any = TextSource(plan.n_tokens, test_size, starts, plan.train_length)
    else:
        source = plan.task
    for item in plan.todo:
        item.work = item.scorer.cut(item.record, source)


def needs_test_split(plan: RunPlan) -> bool:
    """True when a cell still to score reads the test split (a text scorer)."""
    return any(item.scorer.kind == TEXT for item in plan.todo)
