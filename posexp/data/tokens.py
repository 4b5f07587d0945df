"""Token streams cached on disk as .npy, and random-window LM batches that resume exactly.

``tokenize_splits`` writes per split a token file (``.npy``) and the start of each document in
it (``.starts.npy``), streamed shard by shard (``posexp.data.shards``), and returns them
memory-mapped. The file name hashes the tokenizer fingerprint and the corpus fingerprint (the
documents' content, or for streamed files their paths, sizes and times), plus the split's token
budget, so a changed dataset, tokenizer or vocabulary never reuses a stale cache; the caller's
key gives the name its readable prefix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

import numpy as np
import torch

from posexp.checks import positive_int
from posexp.data.registry import Corpus, token_budget
from posexp.data.shards import atomic_write, tokenize_split
from posexp.data.tokenizers import Tokenizer, token_dtype
from posexp.errors import PosexpError, first_line
from posexp.store.files import cache_lock, set_aside

CACHE_VERSION = "tokens-v2"

log = logging.getLogger("posexp")


def cache_name(key: str, *parts: str) -> str:
    """Readable, filesystem-safe prefix of `key` plus a hash of `key` and `parts`."""
    digest = hashlib.blake2b(json.dumps([CACHE_VERSION, key, *parts]).encode(), digest_size=8)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_")[:60] or "tokens"
    return f"{slug}-{digest.hexdigest()}"


def save_npy(path: Path, array: np.ndarray) -> None:
    """Save `array` as .npy atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object, so np.save does not append ".npy"
            np.save(f, array)

    atomic_write(path, write)


class TokenSplits(dict):
    """Split -> its token array (memory-mapped), with ``starts``: split -> where each document
    begins in it (int64; document i is ``tokens[starts[i]:starts[i + 1]]``, its eos last)."""

    starts: dict[str, np.ndarray]


def tokenize_splits(
    corpus: Corpus, tokenizer: Tokenizer, cache_dir: Path, key: str
) -> dict[str, np.ndarray]:
    """Per split, the documents' tokens with `eos_id` after each, cached; memory-mapped arrays
    (a ``TokenSplits``, which also has each split's document starts). ``corpus.params`` may
    hold ``max_tokens`` (the first N tokens of a split) and ``workers`` (tokenizer processes)."""
    # Not hashed with ``key``: settings that do not change the tokens (data.workers,
    # data.doc_mask) share one entry.
    name = cache_name(corpus.source or "tokens", tokenizer.fingerprint, corpus.fingerprint())
    budget = token_budget(corpus.params)
    workers = corpus.params.get("workers")
    out = TokenSplits()
    out.starts = {}
    dtype = token_dtype(tokenizer.vocab_size)
    for split, docs in corpus.splits.items():
        if isinstance(docs, list) and not docs:  # nothing to tokenize (a synthetic task)
            out[split] = np.zeros(0, dtype=dtype)
            out.starts[split] = np.zeros(0, dtype=np.int64)
            continue
        limit = budget[split]
        entry = f"{name}.{split}" + (f"-max{limit}" if limit is not None else "")
        path = Path(cache_dir) / f"{entry}.npy"
        starts = path.with_name(f"{entry}.starts.npy")
        cached = read_cached(path, starts, tokenizer.vocab_size)
        if cached is None:
            with cache_lock(path):
                cached = read_cached(path, starts, tokenizer.vocab_size)  # another job's
                if cached is None:
                    log.info("tokenizing the %s split (once; cached in %s)", split, path.parent)
                    parts = Path(cache_dir) / f"{name}.{split}.parts"
                    tokenize_split(docs, tokenizer, parts, path, starts, split, limit, workers)
                    cached = read_cached(path, starts, tokenizer.vocab_size)
                    if cached is None:  # just written: unreadable means the disk lost it
                        raise PosexpError(f"the token cache {str(path)!r} cannot be read back")
        out[split], out.starts[split] = cached
    return out


def read_cached(
    path: Path, starts_path: Path, vocab_size: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """A split's cached tokens and document starts, memory-mapped; None when either is missing
    or damaged (set aside, to be made again)."""
    if not path.exists():
        return None
    tokens = read_cached_tokens(path, vocab_size)
    if tokens is None:
        return None
    starts = read_starts(starts_path, len(tokens))
    if starts is None:
        del tokens
        set_aside(path, "its document starts are missing or damaged")
        return None
    return tokens, starts


def read_starts(path: Path, n_tokens: int) -> np.ndarray | None:
    """Document starts at ``path``: 1-D int64, increasing from 0, each before ``n_tokens``;
    None (set aside when present) otherwise."""
    if not path.exists():
        return None
    try:
        starts = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        set_aside(path, first_line(e))
        return None
    ok = starts.ndim == 1 and starts.dtype == np.int64 and len(starts) > 0
    if not (ok and increasing_within(path, starts, n_tokens)):
        del starts
        set_aside(path, "not increasing int64 document starts within the tokens")
        return None
    return starts


def read_cached_tokens(path: Path, vocab_size: int) -> np.ndarray | None:
    """The cached token stream at ``path``, memory-mapped; None when it is damaged (set aside):
    unreadable, not a 1-D array of the vocabulary's dtype, or holding an id past the vocabulary."""
    try:
        tokens = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        set_aside(path, first_line(e))
        return None
    want = np.dtype(token_dtype(vocab_size))
    if tokens.ndim != 1 or tokens.dtype != want:
        problem = f"a {tokens.dtype} array of shape {tokens.shape}, not 1-D {want}"
    elif len(tokens) and (top := largest_id(path, tokens)) >= vocab_size:
        problem = f"token id {top} past the vocabulary of {vocab_size}"
    else:
        return tokens
    del tokens  # unmapped before the rename
    set_aside(path, problem)
    return None


def increasing_within(path: Path, starts: np.memmap, n_tokens: int, chunk: int = 1 << 22) -> bool:
    """Whether the starts saved at ``path`` begin at 0, increase, and stay below ``n_tokens``:
    read in chunks with plain reads (see ``largest_id``)."""
    last = -1
    with open(path, "rb") as f:
        f.seek(int(starts.offset))
        while len(part := np.fromfile(f, dtype=np.int64, count=chunk)):
            if last < 0 and part[0] != 0:
                return False
            if part[0] <= last or (len(part) > 1 and not bool(np.all(part[1:] > part[:-1]))):
                return False
            last = int(part[-1])
    return last < n_tokens


def largest_id(path: Path, tokens: np.memmap, chunk: int = 1 << 23) -> int:
    """The largest id of a cached token file, read in chunks with plain reads rather than through
    its mapping: pages read through a mapping stay in the process's resident memory, so checking
    a corpus of a GB would add a GB to the run's peak RSS."""
    top = 0
    with open(path, "rb") as f:
        f.seek(int(tokens.offset))
        while True:
            part = np.fromfile(f, dtype=tokens.dtype, count=chunk)
            if not len(part):
                return top
            top = max(top, int(part.max()))


class LMBatches:
    """Random (inputs, targets) windows of a token stream; batch `step` depends only on (seed, step)."""

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int) -> None:
        positive_int("batch_size", batch_size)
        positive_int("seq_len", seq_len)
        if len(tokens) < seq_len + 1:
            raise PosexpError(
                f"the train split has {len(tokens)} tokens, too short for seq_len={seq_len}; "
                f"allowed: seq_len up to {len(tokens) - 1}, or at least {seq_len + 1} tokens of "
                "train text"
            )
        self.tokens, self.batch_size, self.seq_len, self.seed = tokens, batch_size, seq_len, seed
        self._span = np.arange(seq_len + 1)

    def window_starts(self, step: int) -> np.ndarray:
        """Where each window of batch ``step`` begins in the stream."""
        # A fresh generator seeded by (seed, step): resuming at step k needs no saved RNG state.
        rng = np.random.default_rng([self.seed, step])
        return rng.integers(0, len(self.tokens) - self.seq_len, size=self.batch_size)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 (inputs, targets) of shape (batch_size, seq_len); targets = inputs shifted by one."""
        starts = self.window_starts(step)
        windows = torch.from_numpy(self.tokens[starts[:, None] + self._span].astype(np.int64))
        # contiguous so callers can .view(-1) them for the loss
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def window_documents(
    starts: np.ndarray, window_starts: np.ndarray, length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """For windows ``tokens[s : s + length]`` of a stream whose documents begin at ``starts``:
    int64 (B, length) (document index of each token, its position counted from where its
    document enters the window). The inputs of document masking: equal ids mark one document,
    and each document's positions start again at 0 (a document cut by the window's start, at
    the window's start)."""
    at = np.asarray(window_starts, dtype=np.int64)[:, None] + np.arange(length)
    doc = np.searchsorted(starts, at, side="right") - 1
    begin = np.maximum(np.asarray(starts)[doc], at[:, :1])
    return torch.from_numpy(doc), torch.from_numpy(at - begin)


def eval_windows(
    tokens: np.ndarray, seq_len: int, n_tokens: int, split: str = "val"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed eval set: the first `n_tokens` tokens cut into consecutive windows.

    Window i has inputs tokens[i*seq_len : (i+1)*seq_len] and targets shifted by one, so input
    windows do not overlap and every token after the first is predicted exactly once; a tail
    shorter than a window is dropped. Returns int64 (inputs, targets) of shape (n, seq_len).
    """
    positive_int("seq_len", seq_len)
    positive_int("n_tokens", n_tokens)
    m = min(n_tokens, len(tokens))
    n = (m - 1) // seq_len
    if n < 1:
        raise PosexpError(
            f"the {split} split has {m} tokens, too short for one window of seq_len={seq_len}; "
            f"allowed: seq_len up to {max(m - 1, 0)}, or a {split} split of at least "
            f"{seq_len + 1} tokens"
        )
    flat = torch.from_numpy(np.asarray(tokens[: n * seq_len + 1], dtype=np.int64))
    return flat[:-1].view(n, seq_len), flat[1:].view(n, seq_len)
