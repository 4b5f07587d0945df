"""Scoring for `posexp eval-extrapolate`: per-token losses over windows, and their summaries."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from posexp.commands.extrapolate.plan import DEFAULT_BATCH_TOKENS, PER_POSITION_BUCKETS, Window
from posexp.model import GPT
from posexp.pe import PositionOutOfRange

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


def out_of_table_note(error: PositionOutOfRange) -> str:
    """Why the model cannot score a length, in the encoding's words (the same at every length)."""
    return f"not applicable: {error.reason}"


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
    return {
        "protocol": protocol,
        "start": edges[:-1].tolist(),
        "end": edges[1:].tolist(),
        "loss": means,
    }
