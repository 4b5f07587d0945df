"""``nonoverlap``: perplexity over consecutive windows of L tokens (every target scored)."""

from __future__ import annotations

from typing import Any

from posexp.scoring.registry import PPL, TEXT, Scorer, Work, register_scorer
from posexp.scoring.text import TEXT_FIELDS, score_text, windows_work
from posexp.scoring.windows import nonoverlap_windows


def cut(cell: Any, source: Any) -> Work:
    """Consecutive windows of the cell's length over the first ``source.n_tokens`` targets."""
    windows = nonoverlap_windows(source.n_tokens, cell.length)
    return windows_work(windows, cell.length, source.n_tokens, source.test_size)


register_scorer(Scorer("nonoverlap", TEXT, PPL, TEXT_FIELDS, cut, score_text))
