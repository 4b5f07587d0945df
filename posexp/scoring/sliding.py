"""``sliding``: perplexity over windows of L tokens advanced by a stride S, each target scored
once with L-S..L-1 tokens of context (Press et al. 2022)."""

from __future__ import annotations

from typing import Any

from posexp.scoring.registry import PPL, TEXT, Scorer, Work, register_scorer
from posexp.scoring.text import TEXT_FIELDS, score_text, windows_work
from posexp.scoring.windows import sliding_windows


def cut(cell: Any, source: Any) -> Work:
    """Windows of the cell's length advanced by its stride over the first ``n_tokens`` targets."""
    windows = sliding_windows(source.n_tokens, cell.length, cell.stride)
    return windows_work(windows, cell.length, source.n_tokens, source.test_size)


register_scorer(Scorer("sliding", TEXT, PPL, TEXT_FIELDS, cut, score_text, uses_stride=True))
