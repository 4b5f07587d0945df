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
import csv
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from posexp.checkpoint import (
    checkpoint_dir,
    load_weights,
    read_meta,
    write_bytes_atomic,
    write_json_atomic,
)
from posexp.errors import PosexpError, choose
from posexp.extension import EXTENSIONS, ExtensionConfig
from posexp.extension.registry import check_factor
from posexp.model import GPT, ModelConfig
from posexp.pe import PositionOutOfRange, accepted_extensions, check_extension
from posexp.tasks.common import Data, build_data, config_hash, latest_run, resolve_device

PROTOCOLS = ("nonoverlap", "sliding")
PROTOCOL_CHOICES = ("nonoverlap", "sliding", "both")
BAKED = "baked"
DEFAULT_LEN = 4096
DEFAULT_TOKENS = 16384
DEFAULT_BATCH_TOKENS = 8192
PER_POSITION_BUCKETS = 64
EVAL_DIR = "eval"
# TensorBoard events go into the run dir itself, in files with this suffix (see write_tensorboard).
TB_SUFFIX = ".extrapolate"
FIELDS = ("method", "length", "protocol", "factor", "ppl", "loss", "tokens", "seconds", "note", "stride")


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

    def with_run_defaults(self, cfg: DictConfig) -> Settings:
        """Fill unset options from the run config's `extrapolate:` section (set by presets)."""
        section = cfg.get("extrapolate") if cfg is not None else None
        if not section:
            return self
        preset = OmegaConf.to_container(section, resolve=True)
        unknown = set(preset) - {"len", "lengths", "method", "factor", "protocol", "stride", "tokens"}
        if unknown:
            raise PosexpError(f"unknown keys in the run's extrapolate config: {sorted(unknown)}")
        out = Settings(**vars(self))
        if out.max_len is None and out.lengths is None:
            out.max_len = preset.get("len")
            out.lengths = parse_int_list(preset.get("lengths"))
        for key, attr in (("factor", "factor"), ("protocol", "protocol"), ("stride", "stride"),
                          ("tokens", "tokens")):
            if getattr(out, attr) is None and preset.get(key) is not None:
                setattr(out, attr, preset[key])
        if out.methods is None and preset.get("method") is not None:
            out.methods = parse_methods(preset["method"])
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

    @property
    def work(self) -> int:
        return sum(w.length for w in self.windows)


@dataclass
class RunPlan:
    """Everything needed to evaluate one run."""

    run_dir: Path
    meta: dict[str, Any]
    cfg: DictConfig
    train_length: int
    n_tokens: int
    items: list[Item]
    dropped: list[str] = field(default_factory=list)  # asked-for methods that do not apply

    @property
    def pe(self) -> str:
        return self.meta["model"]["pe"]

    @property
    def longest(self) -> int:
        return max(i.length for i in self.items)


def is_run_dir(path: Path) -> bool:
    """A run dir holds a checkpoint (or the previous one, if a swap was interrupted)."""
    return any((path / name / "meta.json").is_file() for name in ("checkpoint", "checkpoint.old"))


def find_runs(target: Path | str | Sequence[Path | str] | None) -> list[Path]:
    """The run dir itself, every job with a checkpoint in a sweep dir, or the newest run."""
    if target is None:
        return [latest_run(Path("outputs"))]
    if isinstance(target, (list, tuple)):
        return [run for t in target for run in find_runs(t)]
    path = Path(target)
    if not path.is_dir():
        raise PosexpError(f"run dir not found: {str(path)!r}")
    if is_run_dir(path):
        return [path]
    jobs = sorted({p.parent.parent for p in path.rglob("meta.json")
                   if p.parent.name in ("checkpoint", "checkpoint.old")})
    if not jobs:
        raise PosexpError(
            f"no checkpoint in {str(path)!r} (expected checkpoint/meta.json, or a sweep dir of runs)"
        )
    return jobs


def run_config(meta: dict[str, Any]) -> DictConfig:
    """The run's saved config, with the token cache taken from this shell (POSEXP_CACHE)."""
    cfg = OmegaConf.create(meta.get("config") or {})
    if os.environ.get("POSEXP_CACHE"):
        cfg.cache_dir = os.environ["POSEXP_CACHE"]
    return cfg


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


def plan_run(run_dir: Path, settings: Settings, n_runs: int) -> RunPlan:
    """Decide every method × length × protocol for one run, validating the user's choices.

    Windows are attached later by ``attach_windows``, once the test split's size is known, so
    bad options fail before any data is loaded.
    """
    meta = read_meta(run_dir)
    cfg = run_config(meta)
    s = settings.with_run_defaults(cfg)
    mdict = meta["model"]
    pe, train_length = mdict["pe"], int(mdict["train_length"])
    baked = dict(mdict.get("extension") or {"method": "none"})
    has_baked = baked.get("method", "none") != "none"
    lengths = plan_lengths(s, train_length, run_dir)
    protocol = s.protocol or "nonoverlap"
    protocols = PROTOCOLS if protocol == "both" else (protocol,)
    stride = s.stride or max(1, train_length // 2)
    if settings.tokens is not None and settings.tokens < max(lengths):
        raise PosexpError(
            f"--tokens {settings.tokens} is below the longest length {max(lengths)}; every length "
            f"needs at least one full window (allowed: --tokens >= {max(lengths)})"
        )
    # A preset's token count (or the default) grows to one full window at the longest length.
    n_tokens = max(s.tokens or max(DEFAULT_TOKENS, 4 * max(lengths)), max(lengths))

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
                factor, ext, extra = method_extension(method, length, train_length, s.factor)
            for p in protocols:
                items.append(Item(label, length, p, factor, ext,
                                  stride=min(stride, length) if p == "sliding" else None,
                                  note="; ".join(x for x in (note, extra) if x)))
    if not items and n_runs == 1:
        raise PosexpError(f"no method to evaluate for {str(run_dir)!r} (pe={pe}); "
                          f"allowed for {pe}: {', '.join(accepted_extensions(pe))}")
    return RunPlan(run_dir, meta, cfg, train_length, n_tokens, items, dropped)


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


# ---- scoring -------------------------------------------------------------------------------


@dataclass
class Score:
    """Summed per-token loss over scored targets, and the same by position within a window."""

    loss_sum: float = 0.0
    count: int = 0
    pos_sum: np.ndarray | None = None
    pos_count: np.ndarray | None = None

    @property
    def loss(self) -> float:
        return self.loss_sum / self.count if self.count else float("nan")


@torch.no_grad()
def score_windows(
    model: GPT,
    tokens: torch.Tensor,
    windows: Sequence[Window],
    device: torch.device,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    autocast: Callable[[], Any] = contextlib.nullcontext,
    on_batch: Callable[[int], None] | None = None,
) -> Score:
    """Per-token cross-entropy of the scored targets of ``windows`` over the 1-D ``tokens``."""
    model.eval()
    longest = max((w.length for w in windows), default=0)
    score = Score(pos_sum=np.zeros(longest), pos_count=np.zeros(longest, dtype=np.int64))
    by_length: dict[int, list[Window]] = {}
    for w in windows:
        by_length.setdefault(w.length, []).append(w)
    for length, group in by_length.items():
        per_batch = max(1, batch_tokens // length)
        for i in range(0, len(group), per_batch):
            batch = group[i : i + per_batch]
            x = torch.stack([tokens[w.begin : w.end] for w in batch]).to(device)
            y = torch.stack([tokens[w.begin + 1 : w.end + 1] for w in batch]).to(device)
            keep = torch.zeros_like(y, dtype=torch.bool)
            for row, w in enumerate(batch):
                keep[row, length - w.score :] = True
            with autocast():
                logits = model(x)["logits"]
            losses = F.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none"
            ).view_as(y) * keep
            score.loss_sum += float(losses.sum())
            score.count += int(keep.sum())
            score.pos_sum[:length] += losses.sum(0).double().cpu().numpy()
            score.pos_count[:length] += keep.sum(0).cpu().numpy()
            if on_batch is not None:
                on_batch(length * len(batch))
    return score


# ---- running -------------------------------------------------------------------------------


@dataclass
class RunResult:
    """Records of one run plus the per-position curves at its longest length."""

    run_dir: Path
    pe: str
    train_length: int
    records: list[dict[str, Any]]
    per_position: dict[str, Any]
    files: list[Path]


def load_test_tokens(cfg: DictConfig, cache: dict[str, Data]) -> np.ndarray:
    """The test split of a run's data, loaded once per data/tokenizer config."""
    key = config_hash(OmegaConf.to_container(cfg.data, resolve=True),
                      OmegaConf.to_container(cfg.tokenizer, resolve=True), str(cfg.get("cache_dir")))
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
    plans = [plan_run(run_dir, settings, len(runs)) for run_dir in runs]  # all checks first
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


def evaluate_plan(plan: RunPlan, test: np.ndarray, device: torch.device, batch_tokens: int,
                  autocast: Callable[[], Any], bar: Any) -> RunResult:
    """Score every item of one run, then write its JSON, CSV, plots and TensorBoard scalars."""
    mdict = dict(plan.meta["model"])
    base = GPT(ModelConfig(**mdict))
    load_weights(plan.run_dir, base)
    state = base.state_dict()
    tokens = torch.from_numpy(np.asarray(test[: plan.n_tokens + 1]).astype(np.int64))
    models: dict[str, GPT] = {}
    records: list[dict[str, Any]] = []
    longest = plan.longest
    curves: dict[str, dict[str, Any]] = {}
    for item in plan.items:
        record = {"method": item.method, "length": item.length, "protocol": item.protocol,
                  "factor": item.factor, "ppl": None, "loss": None, "tokens": 0, "seconds": 0.0,
                  "note": item.note, "stride": item.stride}
        if not item.skip:
            key = json.dumps(item.extension, sort_keys=True)
            start, done = time.perf_counter(), bar.n
            try:
                if key not in models:
                    models.clear()  # one model alive at a time: they differ only in frequencies
                    model = GPT(ModelConfig(**{**mdict, "extension": item.extension}))
                    model.load_state_dict(state)
                    models[key] = model.to(device).eval()
                score = score_windows(models[key], tokens, item.windows, device, batch_tokens,
                                      autocast, bar.update)
            except PositionOutOfRange:
                bar.update(item.work - (bar.n - done))
                record["note"] = "; ".join(x for x in (item.note, out_of_table_note(mdict)) if x)
            else:
                record.update(loss=score.loss, ppl=safe_exp(score.loss), tokens=score.count)
                if item.length == longest and (item.method not in curves
                                               or item.protocol == "nonoverlap"):
                    curves[item.method] = bucket_positions(score, item.protocol)
            record["seconds"] = round(time.perf_counter() - start, 3)
        records.append(record)
    per_position = {"length": longest, "train_length": plan.train_length,
                    "buckets": PER_POSITION_BUCKETS, "methods": curves}
    files = write_outputs(plan, records, per_position)
    return RunResult(plan.run_dir, plan.pe, plan.train_length, records, per_position, files)


def out_of_table_note(mdict: dict[str, Any]) -> str:
    """Why a learned table cannot score a length (the same words at every length)."""
    rows = mdict.get("pe_params", {}).get("max_len") or mdict["train_length"]
    return (f"not applicable: the learned position table has {rows} rows and positions past "
            f"them have no embedding (use --method pi)")


def safe_exp(loss: float) -> float | None:
    """exp(loss), or None for a non-finite loss (JSON has no inf)."""
    if not math.isfinite(loss):
        return None
    return math.exp(loss) if loss < 700 else float("inf")


def bucket_positions(score: Score, protocol: str) -> dict[str, Any]:
    """Mean loss per bucket of positions within the window (None where nothing was scored)."""
    length = len(score.pos_sum)
    n = min(PER_POSITION_BUCKETS, length)
    edges = np.linspace(0, length, n + 1).astype(int)
    means = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        c = int(score.pos_count[lo:hi].sum())
        means.append(float(score.pos_sum[lo:hi].sum() / c) if c else None)
    return {"protocol": protocol, "start": edges[:-1].tolist(), "end": edges[1:].tolist(),
            "loss": means}


# ---- outputs -------------------------------------------------------------------------------


def write_text_atomic(path: Path, text: str) -> None:
    """Write text atomically."""
    write_bytes_atomic(path, text.encode())


def write_csv_atomic(path: Path, rows: list[dict[str, Any]], fields: Sequence[str] | None = None) -> None:
    """CSV with a header, written atomically; None becomes an empty cell."""
    fields = list(fields or (list(rows[0]) if rows else []))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in fields})
    write_text_atomic(path, buf.getvalue())


def figure_png(fig: Any, fmt: str = "png", close: bool = True) -> bytes:
    """Render a matplotlib figure (PNG at 160 dpi, or ``fmt``: svg, pdf), then close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=160)
    if close:
        plt.close(fig)
    return buf.getvalue()


def save_figure_atomic(fig: Any, path: Path) -> bytes:
    """Save a figure as PNG plus a vector SVG beside it, atomically (and close it); PNG bytes."""
    write_bytes_atomic(path.with_suffix(".svg"), figure_png(fig, "svg", close=False))
    png = figure_png(fig)
    write_bytes_atomic(path, png)
    return png


def write_outputs(plan: RunPlan, records: list[dict[str, Any]], per_position: dict[str, Any]) -> list[Path]:
    """JSON, CSV, two PNGs and TensorBoard scalars for one run."""
    out = plan.run_dir / EVAL_DIR
    out.mkdir(exist_ok=True)
    files = [out / "extrapolate.json", out / "extrapolate.csv", out / "per_position.json",
             out / "extrapolate.png", out / "per_position.png"]
    write_json_atomic(files[0], records)
    write_csv_atomic(files[1], records, FIELDS)
    write_json_atomic(files[2], per_position)
    title = f"{plan.run_dir.name}  (pe={plan.pe}, trained at {plan.train_length})"
    ppl_png = save_figure_atomic(plot_ppl(records, plan.train_length, title), files[3])
    pos_png = save_figure_atomic(plot_per_position(per_position, title), files[4])
    write_tensorboard(plan.run_dir, records, {"extrapolate/ppl_plot": ppl_png,
                                              "extrapolate/per_position_loss": pos_png})
    return files


def plot_ppl(records: list[dict[str, Any]], train_length: int, title: str):
    """ppl against length, log-x (and log-y), one line per method, one panel per protocol."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    protocols = [p for p in PROTOCOLS if any(r["protocol"] == p for r in records)]
    fig, axes = plt.subplots(1, len(protocols), figsize=(6 * len(protocols), 4.2), squeeze=False,
                             layout="constrained")
    for ax, protocol in zip(axes[0], protocols, strict=True):
        methods = list(dict.fromkeys(r["method"] for r in records if r["protocol"] == protocol))
        for method in methods:
            pts = sorted((r["length"], r["ppl"]) for r in records
                         if r["protocol"] == protocol and r["method"] == method and r["ppl"] is not None)
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=method)
        ax.axvline(train_length, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel("test perplexity")
        ax.set_title(f"{protocol}")
        ax.grid(True, which="both", alpha=0.3)
        if methods:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_per_position(per_position: dict[str, Any], title: str):
    """Mean loss by position bucket at the longest length, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    for method, curve in per_position["methods"].items():
        xs = [(a + b - 1) / 2 for a, b in zip(curve["start"], curve["end"], strict=True)]
        pts = [(x, y) for x, y in zip(xs, curve["loss"], strict=True) if y is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), label=f"{method} ({curve['protocol']})")
    ax.axvline(per_position["train_length"], color="grey", linestyle=":", linewidth=1,
               label="training length")
    ax.set_xlabel("position in the window (bucketed)")
    ax.set_ylabel("mean loss (nats/token)")
    ax.set_title(f"per-position loss at length {per_position['length']}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def write_tensorboard(run_dir: Path, records: list[dict[str, Any]], images: dict[str, bytes]) -> None:
    """Scalars ``extrapolate/<protocol>/<method>/ppl`` (step = length) in the run's own TB run.

    Written into the run dir, not a subdir, so TensorBoard lists one run per experiment with an
    ``extrapolate`` section next to ``train``/``val``. The events go in a file of their own
    (suffix ``.extrapolate``) that a new evaluation replaces, so curves never duplicate.
    """
    from torch.utils.tensorboard import SummaryWriter

    for old in run_dir.glob(f"events.out.tfevents.*{TB_SUFFIX}"):
        old.unlink()
    writer = SummaryWriter(str(run_dir), filename_suffix=TB_SUFFIX)
    try:
        for r in sorted(records, key=lambda r: r["length"]):
            if r["ppl"] is not None and math.isfinite(r["ppl"]):
                writer.add_scalar(f"extrapolate/{r['protocol']}/{r['method']}/ppl", r["ppl"], r["length"])
        protocols = sorted({r["protocol"] for r in records})
        writer.add_custom_scalars({
            "extrapolate": {
                f"ppl vs length ({p})": ["Multiline", [rf"extrapolate/{p}/.*/ppl"]] for p in protocols
            }
        })
        step = max((r["length"] for r in records), default=0)
        from matplotlib.image import imread

        for tag, png in images.items():  # the PNGs already rendered, not a second rendering
            writer.add_image(tag, imread(io.BytesIO(png), format="png")[..., :3], step,
                             dataformats="HWC")
    finally:
        writer.close()


def print_table(result: RunResult, console: Any = None, several: bool = False) -> None:
    """Rows method × protocol, columns lengths, cells ppl (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    lengths = sorted({r["length"] for r in result.records})
    console.print(f"[bold]{result.run_dir if several else result.run_dir.name}[/bold]: test ppl, "
                  f"pe={result.pe}, trained at {result.train_length}", soft_wrap=True)
    table = Table()
    table.add_column("method")
    table.add_column("protocol")
    for n in lengths:
        table.add_column(f"{n}\n×{n / result.train_length:g}", justify="right")
    rows: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in result.records:
        rows.setdefault((r["method"], r["protocol"]), {})[r["length"]] = r
    for (method, protocol), by_len in rows.items():
        table.add_row(method, protocol, *(fmt_ppl(by_len.get(n)) for n in lengths))
    console.print(table)
    notes = sorted({r["note"] for r in result.records if r["ppl"] is None and r["note"]})
    for note in notes:
        console.print(f"  —: {note}", soft_wrap=True, highlight=False)
    console.print(f"  wrote {result.run_dir / EVAL_DIR}/extrapolate.{{json,csv,png}}, "
                  f"per_position.{{json,png}}", soft_wrap=True, highlight=False)


def fmt_ppl(record: dict[str, Any] | None) -> str:
    """ppl with 4 significant digits, '—' when missing or not applicable."""
    if record is None or record["ppl"] is None:
        return "—"
    ppl = record["ppl"]
    return f"{ppl:.4g}" if ppl < 1e5 else f"{ppl:.2e}"


def has_checkpoint(path: Path) -> bool:
    """True when ``path`` holds a readable checkpoint."""
    try:
        checkpoint_dir(path)
    except PosexpError:
        return False
    return True
