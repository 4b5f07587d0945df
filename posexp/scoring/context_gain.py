"""``context_gain``: how much a model's loss falls when it sees the context beyond L0.

The windows are ``doc_position``'s: one of the cell's length L at the start of each document
chosen. Every target at position t >= L0 there (t + 1 tokens of context, all of its own
document) is scored a second time with a short context: windows of L0 tokens advanced by the
cell's stride S, each scoring its last S targets, so a target sees L0 - S + 1 to L0 tokens
(``posexp.scoring.windows.short_context``; S = 1: exactly L0, the exact case, at L - L0
forward passes of L0 per document). Its **gain** is the short-context loss minus the
long-context loss, in nats: positive where the tokens past L0 help. With S > 1 some targets see
fewer than L0 tokens, so their short loss, and the gain, run slightly high; ``--stride 1``
removes that at S times the cost.

**Key tokens** (after LongPPL, Fang et al. 2024): targets whose gain exceeds ``KEY_GAIN`` nats
and whose long-context loss is below ``KEY_LOSS`` nats (LongPPL's log-probability gain > 2 and
long-context log-probability > -2). They are scored apart: their share of the targets, their
mean loss with the long and the short context, and the perplexity over them (``key_ppl``,
LongPPL-style; the model selects its own key tokens here, so it is bounded by e^KEY_LOSS and
is read beside the share).

The headline is the mean gain over every target at t >= L0 (higher is better: the model uses
the context beyond its training length); per log-scale bucket of positions from L0 to L the
record keeps the mean gain and the long and short losses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from posexp.scoring.doc_position import document_count, documents_note
from posexp.scoring.registry import TEXT, Metric, Scorer, Scoring, Work, register_scorer
from posexp.scoring.text import bucket_sums, log_edges, means, safe_exp, window_losses
from posexp.scoring.windows import Window, long_documents, short_context

# LongPPL's thresholds (Fang et al. 2024): gain > 2 nats and long-context loss < 2 nats.
KEY_GAIN = 2.0
KEY_LOSS = 2.0

GAIN = Metric("gain", "context gain past L0 (nats/token)", True, log_scale=False, decimals=4)
LISTS = (
    "position_edges",
    "position_gain",
    "position_loss",
    "position_short_loss",
    "position_tokens",
)
FIELDS = (
    "gain",
    "loss",
    "short_loss",
    "tokens",
    "documents",
    "key_share",
    "key_tokens",
    "key_loss",
    "key_short_loss",
    "key_ppl",
    *LISTS,
)


def cut(cell: Any, source: Any) -> Work:
    """Per document chosen, its long window (scoring positions L0..L-1) followed by the short
    windows that score the same targets again."""
    length, l0 = cell.length, source.train_length
    if l0 is None or length <= l0:
        return Work(0, note=f"no position past L0 = {l0} in a window of {length:,}")
    note = documents_note(source, length)
    if note:
        return Work(0, note=note)
    begins = long_documents(
        source.starts, source.test_size, length, document_count(source.n_tokens, length)
    )
    stride = cell.stride or 1
    pairs = [
        (Window(b, b + length, length - l0), short_context(b, length, l0, stride)) for b in begins
    ]
    size = sum(long.length + sum(w.length for w in short) for long, short in pairs)
    return Work(size, pairs, reach=max(b + length for b in begins) + 1)


def gain_fields(
    long: np.ndarray,
    short: np.ndarray,
    positions: np.ndarray,
    edges: list[int],
    key_gain: float = KEY_GAIN,
    key_loss: float = KEY_LOSS,
) -> dict[str, Any]:
    """The record's fields from paired token losses (``long``, ``short``: nats, one per target;
    ``positions``: each target's position in its window), bucketed by ``edges``."""
    gain = short - long
    key = (gain > key_gain) & (long < key_loss)
    n, k = len(gain), int(key.sum())
    sums, counts = bucket_sums(positions, gain, edges)
    long_sums, _ = bucket_sums(positions, long, edges)
    short_sums, _ = bucket_sums(positions, short, edges)

    def mean(x: np.ndarray) -> float | None:
        return float(x.mean()) if len(x) else None

    key_loss_mean = mean(long[key])
    return {
        "gain": mean(gain),
        "loss": mean(long),
        "short_loss": mean(short),
        "tokens": n,
        "key_share": k / n if n else None,
        "key_tokens": k,
        "key_loss": key_loss_mean,
        "key_short_loss": mean(short[key]),
        "key_ppl": None if key_loss_mean is None else safe_exp(key_loss_mean),
        "position_edges": edges,
        "position_gain": means(sums, counts),
        "position_loss": means(long_sums, counts),
        "position_short_loss": means(short_sums, counts),
        "position_tokens": [int(c) for c in counts],
    }


def gain_edges(length: int, l0: int) -> list[int]:
    """Log-scale bucket edges from L0 to ``length``: L0, then the powers of 2 above it."""
    return [l0, *(e for e in log_edges(length) if e > l0)]


def score(model: Any, work: Work, scoring: Scoring) -> dict[str, Any]:
    """Each document's long-context and short-context losses, paired target by target."""
    windows = [w for long, short in work.data for w in (long, *short)]
    losses = window_losses(model, scoring.tokens, windows, scoring)
    long_parts, short_parts, at = [], [], 0
    for _, short in work.data:
        long_parts.append(losses[at])
        short_parts.append(np.concatenate(losses[at + 1 : at + 1 + len(short)]))
        at += 1 + len(short)
    length = work.data[0][0].length
    l0 = length - work.data[0][0].score
    positions = np.concatenate([np.arange(l0, length) for _ in work.data])
    fields = gain_fields(
        np.concatenate(long_parts),
        np.concatenate(short_parts),
        positions,
        gain_edges(length, l0),
    )
    fields["documents"] = len(work.data)
    if fields["loss"] is not None and not math.isfinite(fields["loss"]):
        fields["gain"] = None  # a diverged model: no gain to speak of
    return fields


register_scorer(
    Scorer("context_gain", TEXT, GAIN, FIELDS, cut, score, uses_stride=True, lists=LISTS)
)
