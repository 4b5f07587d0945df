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

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posexp.commands.extrapolate.tasks import PROTOCOL as TASK_PROTOCOL
from posexp.commands.extrapolate.tasks import task_data
from posexp.config import RunConfig
from posexp.errors import PosexpError, choose
from posexp.extension import EXTENSIONS, ExtensionConfig
from posexp.extension.registry import check_factor
from posexp.files import check_writable
from posexp.pe import accepted_extensions, check_extension
from posexp.rundir import RunDir, latest_run
from posexp.rundir import find_runs as find_run_dirs
from posexp.runtime.device import resolve_device

log = logging.getLogger("posexp")

PROTOCOLS = ("nonoverlap", "sliding")
PROTOCOL_CHOICES = ("nonoverlap", "sliding", "both")
BAKED = "baked"
DEFAULT_LEN = 4096
DEFAULT_TOKENS = 16384
DEFAULT_BATCH_TOKENS = 8192
PER_POSITION_BUCKETS = 64
# TensorBoard events go into the run dir itself, in files with this suffix (see write_tensorboard).
TB_SUFFIX = ".extrapolate"
TB_METHODS_DIR = "extrapolate"  # <run>/extrapolate/<method>/: one TensorBoard run per method
FIELDS = ("method", "length", "protocol", "factor", "ppl", "loss", "tokens", "seconds", "note", "stride",
          "metric", "accuracy", "examples", "depth")


# ---- settings ------------------------------------------------------------------------------


@dataclass
class Settings:
    """What the user asked for; None means "the run's `extrapolate:` config, else the default"."""

    max_len: int | None = None
    lengths: list[int] | None = None
    methods: list[str] | None = None
    factor: float | None = None
    protocol: str | None = None
    stride: int | None = None
    tokens: int | None = None
    device: str = "auto"
    batch_tokens: int = DEFAULT_BATCH_TOKENS

    def validate(self) -> None:
        """Reject bad values before any run is loaded."""
        for name in ("max_len", "stride", "tokens", "batch_tokens"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise PosexpError(f"--{name.replace('_', '-') if name != 'max_len' else 'len'} "
                                  f"must be a positive integer, got {value}")
        if self.lengths is not None:
            if not self.lengths or any(n <= 0 for n in self.lengths):
                raise PosexpError(f"--lengths must be positive integers, got {self.lengths}")
        if self.factor is not None:
            try:
                check_factor(self.factor)
            except PosexpError as e:
                raise PosexpError(f"--{e}") from None
        if self.protocol is not None:
            choose("protocol", self.protocol, PROTOCOL_CHOICES)
        if self.methods is not None:
            for m in self.methods:
                choose("method", m, [*EXTENSIONS, BAKED])
        resolve_device(self.device)

    def with_run_defaults(self, cfg: RunConfig) -> Settings:
        """Fill unset options from the run config's `extrapolate:` section (set by presets)."""
        preset = cfg.extrapolate
        out = Settings(**vars(self))
        if out.max_len is None and out.lengths is None:
            out.max_len = preset.len
            out.lengths = parse_int_list(preset.lengths)
        for key in ("factor", "protocol", "stride", "tokens"):
            if getattr(out, key) is None and getattr(preset, key) is not None:
                setattr(out, key, getattr(preset, key))
        if out.methods is None and preset.method is not None:
            out.methods = parse_methods(preset.method)
        out.validate()
        return out


def parse_int_list(value: Any) -> list[int] | None:
    """"64,128,256" or [64, 128] -> [64, 128, 256]; None stays None."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        try:
            out.append(int(text))
        except ValueError:
            raise PosexpError(f"--lengths takes integers like 64,128,256, got {item!r}") from None
    return out


def parse_methods(values: str | Iterable[str] | None) -> list[str] | None:
    """Comma lists and repeated options, in order, without duplicates."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for value in values:
        for name in str(value).split(","):
            name = name.strip()
            if name and name not in out:
                out.append(name)
    return out or None


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
    return [Window(b, min(b + length, n_tokens), min(b + length, n_tokens) - b)
            for b in range(0, n_tokens, length)]


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
    extension: dict[str, Any] | None
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
    """The run dir itself, every job with a checkpoint in a sweep dir, or the newest run."""
    if target is None:
        return [latest_run()]
    if isinstance(target, (list, tuple)):
        return [run for t in target for run in find_runs(t)]
    return find_run_dirs(target, need_checkpoint=True, what="--run")


def plan_lengths(settings: Settings, train_length: int, run_dir: Path) -> list[int]:
    """Explicit --lengths, else doubling from the training length up to --len (inclusive)."""
    if settings.lengths:
        return sorted(set(settings.lengths))
    max_len = settings.max_len or DEFAULT_LEN
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
    s = settings.with_run_defaults(cfg)
    mdict = meta["model"]
    pe, train_length = mdict["pe"], int(mdict["train_length"])
    baked = dict(mdict.get("extension") or {"method": "none"})
    has_baked = baked.get("method", "none") != "none"
    task = task_data(cfg)
    if task is not None:
        if settings.max_len is not None or settings.protocol is not None or settings.tokens is not None:
            raise PosexpError(f"{str(run_dir)!r} is a {task.task.name} task run: it is scored by "
                              f"test sizes; allowed: --lengths (in {task.task.unit}), --method, --factor")
        lengths = sorted(set(settings.lengths or task.test_lengths))
        for n in lengths:
            if n < task.task.min_length:
                raise PosexpError(f"--lengths {n} is below the smallest {task.task.name} size "
                                  f"{task.task.min_length}; allowed: sizes >= {task.task.min_length}")
        train_length = task.longest_train_row()  # positions trained: the longest training row
        protocols: tuple[str, ...] = (TASK_PROTOCOL,)
    else:
        lengths = plan_lengths(s, train_length, run_dir)
        protocol = s.protocol or "nonoverlap"
        protocols = PROTOCOLS if protocol == "both" else (protocol,)
    variants = (task.task.variants or (None,)) if task is not None else (None,)
    stride = s.stride or max(1, train_length // 2)
    if settings.tokens is not None and settings.tokens < max(lengths):
        raise PosexpError(
            f"--tokens {settings.tokens} is below the longest length {max(lengths)}; every length "
            f"needs at least one full window (allowed: --tokens >= {max(lengths)})"
        )
    # A preset's token count (or the default) grows to one full window at the longest length.
    n_tokens = max(s.tokens or max(DEFAULT_TOKENS, 4 * max(lengths)), max(lengths))

    unfinished = unfinished_note(run, meta, cfg)
    if unfinished:
        log.warning("%s: %s; its records say so", run_dir, unfinished)
    methods = ([BAKED] if has_baked else []) + accepted_extensions(pe) if s.methods is None else s.methods
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
            label = f"{BAKED}:{baked['method']}"
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
                factor, ext = float(baked.get("factor", 1.0)), baked
                extra = (f"baked in by finetune: factor {factor:g}, "
                         f"original_length {baked.get('original_length')}")
            else:
                tokens = task.task.row_tokens(length) if task is not None else length
                factor, ext, extra = method_extension(method, tokens, train_length, s.factor)
            for p in protocols:
                for depth in variants:
                    items.append(Item(label, length, p, factor, ext,
                                      stride=min(stride, length) if p == "sliding" else None,
                                      note="; ".join(x for x in (note, extra, unfinished) if x),
                                      depth=depth))
    if not items and n_runs == 1:
        raise PosexpError(f"no method to evaluate for {str(run_dir)!r} (pe={pe}); "
                          f"allowed for {pe}: {', '.join(accepted_extensions(pe))}")
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
            item.note = (f"the test split has only {test_size} tokens, "
                         f"too few for one window of {item.length}")
        elif item.protocol == "nonoverlap":
            item.windows = nonoverlap_windows(plan.n_tokens, item.length)
        else:
            item.windows = sliding_windows(plan.n_tokens, item.length, item.stride)


def method_extension(method: str, length: int, train_length: int, fixed: float | None
                     ) -> tuple[float, dict[str, Any], str]:
    """(factor, extension dict, note) for a method evaluated at ``length``."""
    note = ""
    if method == "none":
        factor = 1.0
    elif fixed is not None:
        factor = float(fixed)
    elif EXTENSIONS[method].dynamic:
        # Dynamic NTK already scales with the window length l; s = l/L0 on top would count it twice.
        factor, note = 1.0, "dynamic: base follows the window length"
    else:
        factor = max(1.0, length / train_length)
    ext = {"method": method, "factor": factor, "original_length": train_length}
    ExtensionConfig.from_dict(ext)  # validates the method's params now, not mid-evaluation
    return factor, ext, note
