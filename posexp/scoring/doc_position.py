"""``doc_position``: loss by position within a document, on a log scale of positions.

Each window starts at a document's start and holds only that document: documents of the test
split with at least L + 1 tokens (the cell's length L = k·L0 inputs and their targets), up to
``n_tokens // L`` of them (at least one), spread evenly over those that qualify. Position t is
the target with t + 1 tokens of its own document as context (the document's first token is
context only, never a target). Positions are bucketed 0, 1, 2-3, 4-7, ... up to L
(``posexp.scoring.text.log_edges``); a record holds, per bucket, the mean loss and the tokens
behind it, the edges, the documents used, and the perplexity over every token of those windows
(its headline). A curve that falls past L0 shows a model that uses the context beyond its
training length; one that rises shows one that breaks there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posexp.scoring.registry import PPL, TEXT, Scorer, Scoring, Work, register_scorer
from posexp.scoring.text import bucket_sums, log_edges, means, safe_exp, window_losses
from posexp.scoring.windows import Window, document_lengths, long_documents

LISTS = ("position_edges", "position_loss", "position_tokens")
FIELDS = ("ppl", "loss", "tokens", "documents", *LISTS)


def documents_note(source: Any, length: int) -> str:
    """Why no document of the split holds a window of ``length`` ('' when one does)."""
    if source.starts is None or not len(source.starts):
        return "the test split keeps no document starts"
    sizes = document_lengths(source.starts, source.test_size)
    if int(sizes.max()) >= length + 1:
        return ""
    return (
        f"no test document holds {length + 1:,} tokens (a window of {length:,} and its targets): "
        f"the longest of {len(sizes):,} has {int(sizes.max()):,}"
    )


def document_count(n_tokens: int, length: int) -> int:
    """How many documents a cell scores: its sample of ``n_tokens`` in windows of ``length``."""
    return max(1, n_tokens // length)


def cut(cell: Any, source: Any) -> Work:
    """A window of the cell's length at the start of each document chosen (see the module)."""
    note = documents_note(source, cell.length)
    if note:
        return Work(0, note=note)
    begins = long_documents(
        source.starts, source.test_size, cell.length, document_count(source.n_tokens, cell.length)
    )
    windows = [Window(b, b + cell.length, cell.length) for b in begins]
    return Work(len(windows) * cell.length, windows, reach=max(w.end for w in windows) + 1)


def summarize(losses: list[np.ndarray], length: int) -> dict[str, Any]:
    """The record's fields from the losses of each document's window (positions 0..length-1)."""
    edges = log_edges(length)
    values = np.concatenate(losses) if losses else np.zeros(0)
    positions = np.concatenate([np.arange(len(x)) for x in losses]) if losses else np.zeros(0)
    sums, counts = bucket_sums(positions.astype(np.int64), values, edges)
    loss = float(values.mean()) if len(values) else float("nan")
    return {
        "ppl": safe_exp(loss),
        "loss": loss,
        "tokens": int(len(values)),
        "documents": len(losses),
        "position_edges": edges,
        "position_loss": means(sums, counts),
        "position_tokens": [int(c) for c in counts],
    }


def score(model: Any, work: Work, scoring: Scoring) -> dict[str, Any]:
    """Loss by position within the documents of ``work``."""
    losses = window_losses(model, scoring.tokens, work.data, scoring)
    return summarize(losses, work.data[0].length)


register_scorer(Scorer("doc_position", TEXT, PPL, FIELDS, cut, score, lists=LISTS))
