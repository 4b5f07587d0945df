"""Planning `posexp eval-extrapolate`: settings, evaluation windows, and what to score per run.

A plan lists, for one run dir, every method x length x protocol item with its extension settings
and windows. Protocols (both score the same first ``tokens`` targets of the test split at every
length):

* ``nonoverlap``: consecutive windows of L tokens; every target in a window is scored;
* ``sliding``: windows of L tokens advanced by ``stride`` S; the first window scores all its
  targets, later ones only their last S, so each token is scored once with L-S..L-1 tokens of
  context (Press et al. 2022). With S = L the two protocols are identical.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posexp import checks
from posexp.attention import BIAS_QUERY_CHUNK
from posexp.commands.extrapolate.tasks import PROTOCOL as TASK_PROTOCOL
from posexp.commands.extrapolate.tasks import task_data, task_variants
from posexp.config import ExtrapolateConfig, RunConfig
from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.files import check_writable
from posexp.hardware import available_memory
from posexp.pe import accepted_extensions, check_extension
from posexp.rundir import RunDir, latest_run
from posexp.rundir import find_runs as find_run_dirs
from posexp.runtime.device import resolve_device

log = logging.getLogger("posexp")

PROTOCOLS = ("nonoverlap", "sliding")
PROTOCOL_CHOICES = ExtrapolateConfig.PROTOCOLS
BAKED = ExtrapolateConfig.BAKED
DEFAULT_LEN = 4096
DEFAULT_TOKENS = 16384
DEFAULT_BATCH_TOKENS = 8192
PER_POSITION_BUCKETS = 64
# The columns of extrapolate.json / .csv, one record per method x length x protocol.
FIELDS = (
    "method",
    "length",
    "protocol",
    "factor",
    "ppl",
    "loss",
    "tokens",
    "seconds",  # scoring time of this item, a FlexAttention compile inside it excluded
    "compile_seconds",  # that compile, when one happened during this item
    "note",
    "stride",
    "metric",
    "accuracy",
    "examples",
    "depth",
    "precision",
)


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

    def validate(self) -> None:
        """Reject a bad device or batch size before any run is loaded."""
        checks.positive_int("--batch-tokens", self.batch_tokens)
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


# ---- windows -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Inputs tokens[begin:end], targets tokens[begin+1:end+1]; only the last `score` count."""

    begin: int
    end: int
    score: int

    @property
    def length(self) -> int:
        return self.end - self.begin


def nonoverlap_windows(n_tokens: int, length: int) -> list[Window]:
    """Consecutive windows of `length` covering `n_tokens` targets (the last may be shorter)."""
    return [
        Window(b, min(b + length, n_tokens), min(b + length, n_tokens) - b)
        for b in range(0, n_tokens, length)
    ]


def sliding_windows(n_tokens: int, length: int, stride: int) -> list[Window]:
    """Windows of `length` advanced by `stride`, each target scored once with the most context."""
    stride = min(stride, length)
    windows, scored, begin = [], 0, 0
    while scored < n_tokens:
        end = min(begin + length, n_tokens)
        windows.append(Window(begin, end, end - scored))
        scored = end
        begin += stride
    return windows


# ---- planning ------------------------------------------------------------------------------


@dataclass
class Item:
    """One method × length × protocol to evaluate (or a record explaining why not)."""

    method: str
    length: int
    protocol: str
    factor: float
    extension: ExtensionConfig
    stride: int | None = None
    windows: list[Window] = field(default_factory=list)
    note: str = ""
    skip: bool = False  # set when the test split is too short for one window
    depth: float | None = None  # passkey: where the key sits in the filler
    examples: list[tuple[str, str]] | None = None  # task runs: the test instances scored

    @property
    def metric(self) -> str:
        """What the item measures: perplexity of text, or exact-match accuracy of a task."""
        return "ppl" if self.examples is None else "accuracy"

    @property
    def work(self) -> int:
        if self.examples is not None:
            return sum(len(p) + len(a) + 1 for p, a in self.examples)
        return sum(w.length for w in self.windows)


@dataclass
class RunPlan:
    """Everything needed to evaluate one run."""

    run: RunDir
    meta: dict[str, Any]
    cfg: RunConfig
    train_length: int
    n_tokens: int
    items: list[Item]
    dropped: list[str] = field(default_factory=list)  # asked-for methods that do not apply
    task: Any = None  # a synthetic-task run's SyntheticData (then items score instances)

    @property
    def run_dir(self) -> Path:
        return self.run.path

    @property
    def pe(self) -> str:
        return self.meta["model"]["pe"]

    @property
    def longest(self) -> int:
        return max(i.length for i in self.items)


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
    return 4 * (tokens * per_token + 2 * mcfg.n_heads * BIAS_QUERY_CHUNK * length)


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
    """Decide every method × length × protocol for one run, validating the user's choices.

    Windows are attached later by ``attach_windows``, once the test split's size is known, so
    bad options fail before any data is loaded.
    """
    run_dir = run.path
    check_writable(run_dir, "run dir")  # before any scoring, not after it
    meta = run.meta()
    cfg = run.config()
    given, s = settings.extrapolate, settings.for_run(cfg)
    mcfg = run.model_config()
    pe, train_length, baked = mcfg.pe, mcfg.train_length, mcfg.extension
    has_baked = baked.method != "none"
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
        protocols: tuple[str, ...] = (TASK_PROTOCOL,)
    else:
        lengths = plan_lengths(s, train_length, run_dir)
        protocol = s.protocol or "nonoverlap"
        protocols = PROTOCOLS if protocol == "both" else (protocol,)
    variants = task_variants(task, s.depths, run_dir)
    stride = s.stride or max(1, train_length // 2)
    if given.tokens is not None and given.tokens < max(lengths):
        raise PosexpError(
            f"--tokens {given.tokens} is below the longest length {max(lengths)}; every length "
            f"needs at least one full window (allowed: --tokens >= {max(lengths)})"
        )
    # A preset's token count (or the default) grows to one full window at the longest length.
    n_tokens = max(s.tokens or max(DEFAULT_TOKENS, 4 * max(lengths)), max(lengths))
    if task is None:
        check_fits(max(lengths), settings, mcfg, run_dir)

    unfinished = unfinished_note(run, meta, cfg)
    if unfinished:
        log.warning("%s: %s; its records say so", run_dir, unfinished)
    methods = (
        ([BAKED] if has_baked else []) + accepted_extensions(pe) if s.method is None else s.method
    )
    items: list[Item] = []
    dropped: list[str] = []
    for method in methods:
        note = ""
        if method == BAKED:
            if not has_baked:
                if n_runs > 1:
                    dropped.append(method)
                    continue
                raise PosexpError(
                    f"--method baked: {str(run_dir)!r} has no baked-in extension "
                    f"(only runs made by `posexp finetune` with an extension have one)"
                )
            label = f"{BAKED}:{baked.method}"
        else:
            label = method
            if method not in accepted_extensions(pe):
                if n_runs == 1:
                    check_extension(pe, method)  # the one-line error naming what pe can take
                # A sweep mixes PEs: a method this job's PE cannot take is skipped for it.
                dropped.append(method)
                continue
        for length in lengths:
            if method == BAKED:
                factor, ext = baked.factor, baked
                extra = (
                    f"baked in by finetune: factor {factor:g}, "
                    f"original_length {baked.original_length}"
                )
            else:
                tokens = task.task.row_tokens(length) if task is not None else length
                factor, ext, extra = method_extension(method, tokens, train_length, s.factor)
            for p in protocols:
                for depth in variants:
                    items.append(
                        Item(
                            label,
                            length,
                            p,
                            factor,
                            ext,
                            stride=min(stride, length) if p == "sliding" else None,
                            note="; ".join(x for x in (note, extra, unfinished) if x),
                            depth=depth,
                        )
                    )
    if not items and n_runs == 1:
        raise PosexpError(
            f"no method to evaluate for {str(run_dir)!r} (pe={pe}); "
            f"allowed for {pe}: {', '.join(accepted_extensions(pe))}"
        )
    return RunPlan(run, meta, cfg, train_length, n_tokens, items, dropped, task)


@dataclass
class RunResult:
    """Records of one run plus the per-position curves at its longest length."""

    run_dir: Path
    pe: str
    train_length: int
    records: list[dict[str, Any]]
    per_position: dict[str, Any]
    files: list[Path]


def attach_examples(plan: RunPlan) -> None:
    """Give every item of a task run its fixed test instances (a pure function of data.seed)."""
    for item in plan.items:
        item.examples = plan.task.examples("test", item.length, plan.task.test_examples, item.depth)


def attach_windows(plan: RunPlan, test_size: int) -> None:
    """Cap the token count to the test split and cut every item's windows."""
    plan.n_tokens = min(plan.n_tokens, test_size - 1)
    for item in plan.items:
        if item.skip:
            continue
        if item.length > plan.n_tokens:
            item.skip = True
            item.note = (
                f"the test split has only {test_size} tokens, "
                f"too few for one window of {item.length}"
            )
        elif item.protocol == "nonoverlap":
            item.windows = nonoverlap_windows(plan.n_tokens, item.length)
        else:
            item.windows = sliding_windows(plan.n_tokens, item.length, item.stride)


def method_extension(
    method: str, length: int, train_length: int, fixed: float | None
) -> tuple[float, ExtensionConfig, str]:
    """(factor, extension, note) for a method evaluated at ``length``."""
    extension, note = ExtensionConfig.for_length(method, length, train_length, fixed)
    return extension.factor, extension, note
