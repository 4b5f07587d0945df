"""Evaluation windows over a token stream: which tokens a forward pass reads and which it scores.

Both protocols score the same first ``n_tokens`` targets at every length:

* non-overlapping: consecutive windows of L tokens; every target in a window is scored;
* sliding: windows of L tokens advanced by a stride S; the first window scores all its targets,
  later ones only their last S, so each token is scored once with L-S..L-1 tokens of context
  (Press et al. 2022). With S = L the two are identical.
"""

from __future__ import annotations

from dataclasses import dataclass


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
