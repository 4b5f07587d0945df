"""Evaluation windows over a token stream: which tokens a forward pass reads and which it scores.

The window protocols score the same first ``n_tokens`` targets at every length:

* non-overlapping: consecutive windows of L tokens; every target in a window is scored;
* sliding: windows of L tokens advanced by a stride S; the first window scores all its targets,
  later ones only their last S, so each token is scored once with L-S..L-1 tokens of context
  (Press et al. 2022). With S = L the two are identical.

The context-use protocols place windows at documents' starts instead (``long_documents``), so
a window never holds two documents and its position t is the document's; ``short_context``
scores the same targets again with at most L0 tokens of context.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


def document_lengths(starts: np.ndarray, test_size: int) -> np.ndarray:
    """The length in tokens (its eos included) of each document of a split of ``test_size``."""
    starts = np.asarray(starts, dtype=np.int64)
    return np.diff(np.append(starts, test_size))


def long_documents(starts: np.ndarray, test_size: int, length: int, count: int) -> list[int]:
    """Where up to ``count`` documents begin that hold a window of ``length`` inputs and its
    targets (at least ``length + 1`` tokens), spread evenly over all that do, in split order."""
    starts = np.asarray(starts, dtype=np.int64)
    fit = np.flatnonzero(document_lengths(starts, test_size) >= length + 1)
    if len(fit) <= count:
        return [int(starts[i]) for i in fit]
    picks = np.unique(np.round(np.linspace(0, len(fit) - 1, count)).astype(np.int64))
    return [int(starts[fit[i]]) for i in picks]


def short_context(begin: int, length: int, context: int, stride: int) -> list[Window]:
    """Windows of ``context`` tokens that score the targets of positions ``context``..``length
    - 1`` of the window of ``length`` at ``begin`` once each, in order: advanced by ``stride``,
    each scores its last ``stride`` targets, so a target has ``context - stride + 1`` to
    ``context`` tokens of context (exactly ``context`` with stride 1); none reads before
    ``begin``."""
    stride = max(1, min(stride, context))
    windows, done, last = [], begin + context, begin + length
    while done < last:
        end = min(done + stride, last)
        windows.append(Window(end - context, end, end - done))
        done = end
    return windows
