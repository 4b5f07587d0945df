"""PoSE (Zhu et al. 2023): positional skip-wise training, a long context trained on short rows.

A training row of Lc tokens (the window, ``train.seq_len``) is cut into N chunks of random
lengths (each >= 1). Chunk i takes the consecutive positions that start at its start in the row
plus a skip u_i, where u_1 = 0 and u_i is drawn uniformly from [u_(i-1), Lt - Lc], so positions
rise from 0 to below the target length Lt (``train.pose.target_length``). Every relative
distance up to Lt - 1 can occur in training, while a step costs what an Lc-token step costs.

The tokens follow the positions (the paper's v_i = u_i): a row reads a document span of Lt + 1
tokens and keeps the token at each of its positions, so position p always holds the document's
token p, and the target at p is the document's token p + 1 (the last token of a chunk predicts
the token after it in the document, never the next chunk's first). Every draw is a pure function
of (seed, step), so a resumed run draws the same rows and positions.

Synthetic task rows (``prompt <sep> answer <eos>``) keep their content whole (the paper's
v_i = 0): only the positions skip. The window Lc is the longest training row; a row of n <= Lc
tokens is right-padded to Lc, its chunk boundaries are drawn among its own n - 1 gaps (so its
content holds all N chunks when n >= N), and its last chunk runs on through the padding, which
carries no loss. The skips are drawn as for text, so every position stays below Lt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from posexp import checks
from posexp.errors import PosexpError

# Mixed into the seed of the position draw, so it never repeats the stream of another draw made
# from the same (seed, step), such as the batch's document starts.
POSITION_SALT = 0x9053


def pose_layout(
    rows: int,
    window: int,
    target: int,
    chunks: int,
    seed: int,
    step: int,
    filled: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, skips), int64 of shape (rows, chunks): per row, the chunk lengths (each >= 1,
    summing to ``window``) and the skips u (u_1 = 0 <= u_2 <= ... <= u_N <= target - window).

    ``filled``: per row, the tokens before its padding (None: all ``window``); the cuts fall
    inside them first, and only a row of fewer than ``chunks`` tokens has cuts in its padding."""
    if not 2 <= chunks <= window < target:
        raise ValueError(
            f"PoSE needs 2 <= chunks <= window < target, got {chunks}, {window}, {target}"
        )
    rng = np.random.default_rng([seed, step, POSITION_SALT])
    # Chunk boundaries: chunks - 1 distinct cut points in [1, window - 1], uniform per row
    # (uniform among a padded row's own gaps: the cuts in its padding sort after them).
    keys = rng.random((rows, window - 1))
    if filled is not None:
        keys += np.arange(1, window)[None, :] >= np.asarray(filled)[:, None]
    cuts = np.sort(np.argsort(keys, axis=1)[:, : chunks - 1], axis=1) + 1
    edges = np.concatenate(
        [np.zeros((rows, 1), np.int64), cuts, np.full((rows, 1), window, np.int64)], axis=1
    )
    lengths = np.diff(edges, axis=1)
    # Skips drawn in turn, each uniform from the previous one to the room left (the paper's).
    room = target - window
    skips = np.zeros((rows, chunks), np.int64)
    for i in range(1, chunks):
        skips[:, i] = rng.integers(skips[:, i - 1], room, endpoint=True)
    return lengths.astype(np.int64), skips


def pose_positions(
    rows: int,
    window: int,
    target: int,
    chunks: int,
    seed: int,
    step: int,
    filled: np.ndarray | None = None,
) -> torch.Tensor:
    """(rows, window) int64 PoSE positions: chunk i at its row offsets plus skip u_i; strictly
    increasing, first 0, all below ``target``; a pure function of (seed, step, ``filled``)."""
    lengths, skips = pose_layout(rows, window, target, chunks, seed, step, filled)
    chunk_of = np.repeat(np.tile(np.arange(chunks), rows), lengths.reshape(-1)).reshape(
        rows, window
    )
    positions = np.arange(window)[None, :] + np.take_along_axis(skips, chunk_of, axis=1)
    return torch.from_numpy(positions)


def filled_lengths(targets: torch.Tensor) -> np.ndarray:
    """Per row, the tokens up to its last scored target (-100 = none): a right-padded task
    row's own length, the whole width for text. A row with no scored target counts as full."""
    from posexp.data.pairs import IGNORE

    scored = (targets != IGNORE).cpu().numpy()
    width = scored.shape[1]
    last = width - np.argmax(scored[:, ::-1], axis=1)
    return np.where(scored.any(axis=1), last, width).astype(np.int64)


@dataclass(frozen=True)
class PoseConfig:
    """``train.pose``: train windows of ``train.seq_len`` tokens (task rows: the longest
    training row) on positions skipped up to ``target_length`` in ``chunks`` chunks (PoSE);
    off unless ``enabled``."""

    KEYS: ClassVar[tuple[str, ...]] = ("enabled", "target_length", "chunks")

    enabled: bool = False
    target_length: int | None = None
    chunks: int = 2

    @classmethod
    def from_dict(cls, value: Any) -> PoseConfig:
        """Validate the ``train.pose`` mapping (one-line errors); ``check_window`` checks it
        against the window, which the data decides."""
        d = {"enabled": False, "target_length": None, "chunks": 2}
        d |= checks.mapping("train.pose", value)
        checks.known_keys("train.pose", d, cls.KEYS)
        enabled = checks.boolean("train.pose.enabled", d["enabled"])
        target = checks.positive_int(
            "train.pose.target_length", d["target_length"], allow_none=True
        )
        chunks = checks.integer("train.pose.chunks", d["chunks"], low=2)
        if not enabled and target is not None:
            raise PosexpError(
                f"train.pose.target_length={target} only applies with train.pose.enabled=true"
            )
        return cls(enabled, target, chunks)

    def check_window(self, window: int, rows: str | None = None) -> None:
        """Refuse a missing target, one not above the ``window`` PoSE trains on, or more chunks
        than its tokens; ``rows``: the setting that makes a task run's window (its longest
        training row), None for text (``train.seq_len``)."""
        if not self.enabled:
            return
        # Text: "the train.seq_len=256 window"; task rows: "the 21-token window (the longest
        # training row of data.train_lengths=[1, 10])".
        name = f"train.seq_len={window}" if rows is None else f"{window}-token"
        sized = f"train.seq_len={window}-token" if rows is None else name
        row = "" if rows is None else f"the longest training row of {rows}"
        of = f" ({row})" if row else ""
        if self.target_length is None:
            raise PosexpError(
                f"train.pose.enabled=true needs train.pose.target_length, the length to train "
                f"positions for (above the {sized} window{', ' + row if row else ''})"
            )
        if self.target_length <= window:
            raise PosexpError(
                f"train.pose.target_length={self.target_length} must be above the {name} "
                f"window PoSE trains on{of}; allowed: train.pose.target_length > {window}"
            )
        if self.chunks > window:
            raise PosexpError(
                f"train.pose.chunks={self.chunks} is more chunks than the {window} tokens of a "
                f"window{of}; allowed: 2 <= train.pose.chunks <= {window}"
            )

    def describe(self, window: int) -> str:
        """What the log says of it: ``PoSE on: window 256, target 1024, 2 chunks``."""
        return f"PoSE on: window {window}, target {self.target_length}, {self.chunks} chunks"


def check_pose_run(
    pose: PoseConfig,
    pe: str,
    limit: int | None,
    randomized: bool,
    data: str,
    data_params: dict[str, Any],
    seq_len: int,
    rows: int | None = None,
) -> None:
    """Refuse PoSE where it cannot apply: a PE without positions, with pe.randomized, on data
    other than text or task rows, against its window (``seq_len``; task runs: ``rows``, the
    longest training row), or past the positions the PE can represent (``limit``; None: any)."""
    from posexp.data import dataset_kind
    from posexp.pe import get_pe

    if not pose.enabled:
        return
    if get_pe(pe).kind in ("none", "content"):
        raise PosexpError(
            f"train.pose.enabled=true needs a PE that takes positions; pe={pe} has none"
        )
    if randomized:
        raise PosexpError(
            "train.pose.enabled=true and pe.randomized=true both choose the training positions; "
            "use one of them"
        )
    kind = dataset_kind(data)
    if kind == "synthetic" and rows is not None:
        lengths = data_params.get("train_lengths")
        shown = list(lengths) if isinstance(lengths, (list, tuple)) else lengths
        pose.check_window(rows, f"data.train_lengths={shown}")
    elif kind == "lm":
        pose.check_window(seq_len)
    else:
        why = (
            "whose translations are decoded within train.seq_len (translate.*), so positions "
            "trained past it would never be used"
            if kind == "pairs"
            else "which has no PoSE rows"
        )
        raise PosexpError(
            f"train.pose.enabled=true trains on text or synthetic task rows; data={data} is a "
            f"{kind} corpus, {why}"
        )
    if limit is not None and limit < pose.target_length:
        raise PosexpError(
            f"train.pose.target_length={pose.target_length} is past what pe={pe} can represent "
            f"({limit} positions); allowed: train.pose.target_length <= {limit}"
        )


class PoseBatches:
    """PoSE's (inputs, targets) rows of a token stream; batch ``step`` depends only on (seed, step).

    Row r reads the span that starts at a random offset s_r, keeps the tokens at its positions
    P (``pose_positions``) and predicts the next ones: inputs tokens[s_r + P], targets
    tokens[s_r + P + 1]. The trainer hands the model the same positions (drawn again, as pure)."""

    def __init__(
        self, tokens: np.ndarray, batch_size: int, window: int, pose: PoseConfig, seed: int
    ) -> None:
        target = int(pose.target_length or 0)
        if len(tokens) < target + 1:
            # A row reads a span of target + 1 tokens, and the target stays above the window
            # (check_window): a lower one helps only where the stream is longer than the window.
            longest = len(tokens) - 1
            more = f"at least {target + 1} tokens of train text"
            fix = (
                f"train.pose.target_length from {window + 1} to {longest}, or {more}"
                if longest > window
                else f"{more}, as train.pose.target_length must stay above train.seq_len={window}"
            )
            raise PosexpError(
                f"the train split has {len(tokens)} tokens, too short for PoSE spans of "
                f"train.pose.target_length={target} ({target + 1} tokens); allowed: {fix}"
            )
        self.tokens, self.batch_size, self.window, self.seed = tokens, batch_size, window, seed
        self.target, self.chunks = target, pose.chunks

    def positions(self, step: int) -> torch.Tensor:
        """The batch's positions (batch_size, window): what the trainer passes to the model."""
        return pose_positions(
            self.batch_size, self.window, self.target, self.chunks, self.seed, step
        )

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 (inputs, targets) of shape (batch_size, window): the span's tokens at the
        positions, and the tokens one past them."""
        rng = np.random.default_rng([self.seed, step])
        starts = rng.integers(0, len(self.tokens) - self.target, size=self.batch_size)
        at = starts[:, None] + self.positions(step).numpy()
        inputs = np.asarray(self.tokens[at], dtype=np.int64)
        targets = np.asarray(self.tokens[at + 1], dtype=np.int64)
        return torch.from_numpy(inputs), torch.from_numpy(targets)
