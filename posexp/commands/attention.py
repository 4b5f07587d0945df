"""`posexp attention`: where a language-model run's attention goes, at its training length and
at the longest length it was evaluated at, written as CSV and figures under ``<run>/attention/``.

For each length L it reads the first ``windows`` non-overlapping windows of L tokens of the run's
test split (each from position 0), runs the run's own network over them and folds every
layer's attention probabilities into the statistics of ``posexp.model.attention_stats`` one
layer at a time. It writes, swapped in together (``staged_dir``):

* ``distance.csv``, ``entropy.csv``, ``sink.csv``: long format, one row per length, layer,
  head and bucket; ``summary.csv``: one per length, layer and head (the mass at distances of
  at least the training length, the first token's share over the window's second half);
* ``distance_L<L>.png``, ``entropy_L<L>.png``, ``sink_L<L>.png`` with an SVG copy each.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posexp.errors import PosexpError
from posexp.store.rundir import RunDir, latest_run

FOLDER = "attention"
TABLES = ("distance", "entropy", "sink", "summary")
DEFAULT_WINDOWS = 8
DEFAULT_BATCH_TOKENS = 4096
# What a statistic's figure is called and how it is drawn (posexp.results.attention).
FIGURES = {
    "distance": "attention mass by query–key distance",
    "entropy": "attention entropy by query position",
    "sink": "share of attention on the first token by query position",
}


@dataclass(frozen=True)
class AttentionResult:
    """What one ``posexp attention`` wrote: the run, the lengths measured, the windows read at
    each, the files, and the lengths skipped with the reason."""

    run_dir: Path
    lengths: list[int]
    windows: dict[int, int]
    files: list[Path]
    skipped: dict[int, str]


def longest_evaluated(run: RunDir) -> int | None:
    """The longest length among the run's ``eval-extrapolate`` records, None without any."""
    from posexp.scoring.records import RECORDS
    from posexp.store.files import read_json, staged_current

    try:
        records = read_json(staged_current(run.eval_dir) / RECORDS) or []
    except PosexpError:
        return None
    lengths = [int(r["length"]) for r in records if isinstance(r, dict) and "length" in r]
    return max(lengths, default=None)


def measured_lengths(run_dir: Path) -> set[int]:
    """The lengths ``<run>/attention/summary.csv`` holds; empty when absent or unreadable."""
    import csv

    try:
        with open(run_dir / FOLDER / "summary.csv", newline="") as fh:
            return {int(row["length"]) for row in csv.DictReader(fh)}
    except (OSError, KeyError, ValueError):
        return set()


def plan_lengths(train_length: int, length: int | None, evaluated: int | None) -> list[int]:
    """The training length and the longest one asked for (``--len``), else the longest
    evaluated; one of them when they are equal or nothing longer is known."""
    longest = length if length is not None else evaluated
    return sorted({train_length, *([longest] if longest is not None else [])})


def layer_bytes(length: int, batch: int, heads: int) -> int:
    """About what measuring one layer holds at once: its scores, bias and probabilities
    (float32, batch x heads x length² each) and one block of queries in float64 with its
    bucket sums (``attention_stats``)."""
    from posexp.model.attention_stats import QUERY_BLOCK

    return 12 * batch * heads * length**2 + 24 * batch * heads * QUERY_BLOCK * length


def fitting_batch(length: int, batch: int, heads: int, free: int | None) -> int:
    """The largest batch up to ``batch`` whose layer fits in ``free`` bytes (None: unknown,
    ``batch`` as asked); 0 when not even one window fits."""
    if free is None:
        return batch
    while batch > 0 and layer_bytes(length, batch, heads) > free:
        batch //= 2
    return batch


def window_batches(
    test: np.ndarray, length: int, windows: int, batch: int, device: torch.device
) -> Iterator[torch.Tensor]:
    """The first ``windows`` non-overlapping windows of ``length`` tokens of ``test``, ``batch``
    at a time (B, length)."""
    for start in range(0, windows, batch):
        rows = [
            test[i * length : (i + 1) * length] for i in range(start, min(windows, start + batch))
        ]
        yield torch.as_tensor(np.stack(rows).astype(np.int64), device=device)


def check_options(length: int | None, windows: int, batch_tokens: int) -> None:
    """Refuse options no run could be measured with, in one line."""
    if windows < 1:
        raise PosexpError(f"--windows must be a positive integer, got {windows}")
    if batch_tokens < 1:
        raise PosexpError(f"--batch-tokens must be a positive integer, got {batch_tokens}")
    if length is not None and length < 2:
        raise PosexpError(f"--len must be at least 2 tokens, got {length}")


def measure_run(
    run_dir: str | Path | None,
    length: int | None = None,
    windows: int = DEFAULT_WINDOWS,
    device: str = "auto",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    console: Any = None,
) -> AttentionResult:
    """Measure one run's attention at its training length and at ``length`` (default: the
    longest length it was evaluated at) and write ``<run>/attention/``."""
    from posexp.commands.console import stdout_console
    from posexp.commands.extrapolate.score_run import load_test_tokens
    from posexp.data import dataset_kind
    from posexp.model.attention_stats import attention_statistics
    from posexp.runtime.device import resolve_device
    from posexp.runtime.hardware import available_memory
    from posexp.runtime.weights import load_model, saved_model_config
    from posexp.store.files import check_writable

    console = console or stdout_console()
    check_options(length, windows, batch_tokens)
    run = RunDir.open_run(run_dir) if run_dir is not None else latest_run()
    if not run.has_checkpoint():
        raise PosexpError(f"{str(run.path)!r} has no checkpoint to measure (status {run.status()})")
    check_writable(run.path, "run dir")
    cfg = run.config()
    kind = dataset_kind(cfg.data.name)
    if kind != "lm":
        raise PosexpError(
            f"posexp attention reads windows of a text corpus's test split; "
            f"data={cfg.data.name} is a {kind} dataset; allowed: a language-model run"
        )
    mcfg = saved_model_config(run)
    lengths = plan_lengths(mcfg.train_length, length, longest_evaluated(run))
    if length is None and len(lengths) == 1:
        console.print(
            f"{run.path}: no eval-extrapolate records longer than the training length "
            f"{mcfg.train_length}: measuring there only (--len adds a longer one)",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
    run.share("--run")
    try:
        torch_device = resolve_device(device)
        test = load_test_tokens(cfg, {}, run.tokenizer_file).tokens
        model = load_model(run, torch_device)
        measured, counts, skipped = {}, {}, {}
        for n in lengths:
            available = len(test) // n
            if available < 1:
                skipped[n] = f"the test split holds {len(test):,} tokens, fewer than {n:,}"
                continue
            count = min(windows, available)
            free = available_memory(torch_device.type)
            batch = fitting_batch(n, min(count, max(1, batch_tokens // n)), mcfg.n_heads, free)
            if batch == 0:
                need = layer_bytes(n, 1, mcfg.n_heads) / 2**30
                skipped[n] = (
                    f"one layer's attention at {n:,} tokens needs about {need:.1f} GiB and "
                    f"{torch_device.type} has {(free or 0) / 2**30:.1f} GiB free; allowed: a "
                    f"shorter --len"
                )
                continue
            try:
                stats = attention_statistics(
                    model,
                    window_batches(test, n, count, batch, torch_device),
                    n,
                    far=mcfg.train_length,
                )
            except PosexpError as e:  # a length the encoding cannot reach (a learned table)
                skipped[n] = str(e)
                continue
            measured[n], counts[n] = stats.rows(), count
        for n, why in skipped.items():
            console.print(
                f"{run.path}: length {n:,} skipped: {why}",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
        if not measured:
            raise PosexpError(
                f"no length of {str(run.path)!r} could be measured (each named above)"
            )
        title = (
            f"pe={mcfg.pe}, {mcfg.n_layers} layers, {mcfg.n_heads} heads, trained at "
            f"{mcfg.train_length:,} tokens"
        )
        files = write_attention(run.path / FOLDER, measured, counts, title, mcfg.train_length)
    finally:
        run.unlock()
    for path in files:
        if path.suffix in (".csv", ".png"):
            console.print(str(path), soft_wrap=True, highlight=False, markup=False)
    return AttentionResult(run.path, sorted(measured), counts, files, skipped)


def write_attention(
    folder: Path,
    measured: dict[int, dict[str, list[dict[str, Any]]]],
    windows: dict[int, int],
    title: str,
    train_length: int | None = None,
) -> list[Path]:
    """The CSVs (every length in one long table per statistic) and the figures of each length,
    written into a fresh folder swapped in as ``folder``, a dotted line at ``train_length``
    where given; returns the final paths."""
    from posexp.results import attention as figures
    from posexp.store.files import save_figure_atomic, staged_dir, write_csv_atomic

    draw = {
        "distance": figures.plot_distance,
        "entropy": figures.plot_entropy,
        "sink": figures.plot_sink,
    }
    names = []
    with staged_dir(folder) as out:
        for table in TABLES:
            rows = [r for n in sorted(measured) for r in measured[n][table]]
            write_csv_atomic(out / f"{table}.csv", rows)
            names.append(f"{table}.csv")
        for n in sorted(measured):
            for stat, plot in draw.items():
                name = f"{stat}_L{n}.png"
                heading = f"{FIGURES[stat]} at {n:,} tokens ({windows[n]} test windows); {title}"
                save_figure_atomic(plot(measured[n][stat], heading, train_length), out / name)
                names += [name, name.replace(".png", ".svg")]
    return [folder / name for name in names]


def measure_runs(
    target: str | Path | None,
    length: int | None = None,
    windows: int = DEFAULT_WINDOWS,
    device: str = "auto",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    console: Any = None,
) -> list[AttentionResult]:
    """``measure_run`` for one run dir, or for every job of a sweep dir that has a checkpoint:
    a job that cannot be measured is named with its reason and the others go on; the command
    then ends non-zero, saying how many were skipped."""
    from posexp.commands.console import stdout_console
    from posexp.store.rundir import find_runs

    console = console or stdout_console()
    check_options(length, windows, batch_tokens)
    if target is None or RunDir.open(target, "--run").is_run():
        return [measure_run(target, length, windows, device, batch_tokens, console)]
    runs = find_runs(target, need_checkpoint=True, what="--run")
    results, skipped = [], []
    for run in runs:
        try:
            results.append(measure_run(run.path, length, windows, device, batch_tokens, console))
        except PosexpError as e:
            skipped.append(run.path)
            console.print(
                f"{run.path}: skipped: {e}", soft_wrap=True, highlight=False, markup=False
            )
    if skipped:
        raise PosexpError(
            f"measured {len(results)} run(s); skipped {len(skipped)} (each named above)"
        )
    return results
