"""Scoring a language model over windows of its test split: per-token losses and their summaries.

The text scorers (``nonoverlap``, ``sliding``) differ only in their windows; both fill
``ppl``, ``loss``, ``tokens`` and ``per_position`` (mean loss per bucket of positions within
the window, for the loss-by-position plot).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from posexp.errors import PosexpError
from posexp.scoring.registry import Scoring, Work
from posexp.scoring.windows import Window

DEFAULT_BATCH_TOKENS = 8192
PER_POSITION_BUCKETS = 64
TEXT_FIELDS = ("ppl", "loss", "tokens", "per_position")


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
    model: Any,
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
            losses = (
                F.cross_entropy(
                    logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none"
                ).view_as(y)
                * keep
            )
            score.loss_sum += float(losses.sum())
            score.count += int(keep.sum())
            score.pos_sum[:length] += losses.sum(0).double().cpu().numpy()
            score.pos_count[:length] += keep.sum(0).cpu().numpy()
            if on_batch is not None:
                on_batch(length * len(batch))
    return score


@torch.no_grad()
def window_losses(
    model: Any,
    tokens: torch.Tensor,
    windows: Sequence[Window],
    scoring: Scoring,
) -> list[np.ndarray]:
    """Per window of ``windows``, the cross-entropy (nats, float64) of each of its scored
    targets (its last ``score``), in window order: the token-level losses that the context-use
    scorers pair and bucket."""
    model.eval()
    out: list[np.ndarray | None] = [None] * len(windows)
    by_length: dict[int, list[int]] = {}
    for i, w in enumerate(windows):
        by_length.setdefault(w.length, []).append(i)
    for length, group in by_length.items():
        per_batch = max(1, scoring.batch_tokens // length)
        for at in range(0, len(group), per_batch):
            batch = group[at : at + per_batch]
            x = torch.stack([tokens[windows[i].begin : windows[i].end] for i in batch])
            y = torch.stack([tokens[windows[i].begin + 1 : windows[i].end + 1] for i in batch])
            x, y = x.to(scoring.device), y.to(scoring.device)
            with scoring.autocast():
                logits = model(x)["logits"]
            losses = F.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none"
            ).view_as(y)
            losses = losses.double().cpu().numpy()
            for row, i in enumerate(batch):
                out[i] = losses[row, length - windows[i].score :]
            scoring.advance(length * len(batch))
    return [a if a is not None else np.zeros(0) for a in out]


def log_edges(length: int) -> list[int]:
    """Edges of position buckets on a log scale over a window of ``length`` targets: 0, 1, 2,
    4, ... up to ``length`` (bucket k holds positions edges[k] <= t < edges[k+1]; position t
    is the target with t + 1 tokens of context)."""
    edges, step = [0], 1
    while step < length:
        edges.append(step)
        step *= 2
    return [*edges, length]


def bucket_sums(
    positions: np.ndarray, values: np.ndarray, edges: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per bucket of ``edges``, the sum of ``values`` at ``positions`` in it and their count."""
    index = np.searchsorted(np.asarray(edges), positions, side="right") - 1
    n = len(edges) - 1
    return (
        np.bincount(index, weights=values, minlength=n)[:n],
        np.bincount(index, minlength=n)[:n].astype(np.int64),
    )


def means(sums: np.ndarray, counts: np.ndarray) -> list[float | None]:
    """sums / counts per bucket, rounded to 6 places, None where the count is 0."""
    return [round(float(s / c), 6) if c else None for s, c in zip(sums, counts, strict=True)]


def safe_exp(loss: float) -> float | None:
    """exp(loss), or None for a non-finite loss (JSON has no inf)."""
    if not math.isfinite(loss):
        return None
    return math.exp(loss) if loss < 700 else float("inf")


def bucket_positions(score: Score) -> list[float | None]:
    """Mean loss per bucket of positions within the window (None where nothing was scored);
    bucket edges are ``bucket_edges(window length)``."""
    edges = bucket_edges(len(score.pos_sum))
    means = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        c = int(score.pos_count[lo:hi].sum())
        means.append(round(float(score.pos_sum[lo:hi].sum() / c), 6) if c else None)
    return means


def bucket_edges(length: int) -> list[int]:
    """The edges of the per-position buckets of a window of ``length`` tokens."""
    n = min(PER_POSITION_BUCKETS, length)
    return np.linspace(0, length, n + 1).astype(int).tolist()


@dataclass(frozen=True)
class TextSource:
    """What a text scorer cuts windows from: ``n_tokens`` targets of a ``test_size`` split,
    where each of its documents begins (``starts``; None where the data keeps none), and the
    length the run's positions were trained at (``train_length``, L0)."""

    n_tokens: int
    test_size: int
    starts: np.ndarray | None = None
    train_length: int | None = None


@dataclass(frozen=True)
class TestSplit:
    """A run's test split: its tokens (1-D, memory-mapped) and where each document begins in
    them (``starts``, int64, increasing from 0; document i is ``tokens[starts[i]:starts[i+1]]``,
    its eos last)."""

    tokens: np.ndarray
    starts: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)


def check_windows_fit(lengths: list[int], test_size: int) -> None:
    """Refuse lengths no window of the test split fits (their cells would stay empty in every
    later table of the run), naming the split's size."""
    too_long = sorted({n for n in lengths if n > test_size - 1})
    if too_long:
        raise PosexpError(
            f"length {', '.join(f'{n:,}' for n in too_long)} is longer than the run's test split "
            f"({test_size:,} tokens): no window fits; allowed: lengths up to {test_size - 1:,}"
        )


def windows_work(windows: list[Window], length: int, n_tokens: int, test_size: int) -> Work:
    """The work of a text cell: its windows, or why there are none."""
    if length > n_tokens:
        return Work(
            0,
            note=f"the test split has only {test_size} tokens, too few for one window of {length}",
        )
    return Work(sum(w.length for w in windows), windows)


def score_text(model: Any, work: Work, scoring: Scoring) -> dict[str, Any]:
    """The text scorers' fields for the windows of ``work``."""
    score = score_windows(
        model,
        scoring.tokens,
        work.data,
        scoring.device,
        scoring.batch_tokens,
        scoring.autocast,
        scoring.advance,
    )
    return {
        "ppl": safe_exp(score.loss),
        "loss": score.loss,
        "tokens": score.count,
        "per_position": bucket_positions(score),
    }
