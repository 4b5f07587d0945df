"""Token streams cached on disk as .npy, and random-window LM batches that resume exactly.

``tokenize_splits`` writes one ``.npy`` per split (atomically: temp file, then ``os.replace``) and
returns them memory-mapped. The file name hashes the caller's key, the tokenizer fingerprint and
the corpus content fingerprint, so a changed dataset, tokenizer or vocabulary never reuses a
stale cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from posexp.checks import positive_int
from posexp.data.registry import Corpus
from posexp.data.tokenizers import Tokenizer, token_dtype
from posexp.errors import PosexpError, first_line
from posexp.store.files import cache_lock, set_aside

CACHE_VERSION = "tokens-v1"

log = logging.getLogger("posexp")


def cache_name(key: str, *parts: str) -> str:
    """Readable, filesystem-safe prefix of `key` plus a hash of `key` and `parts`."""
    digest = hashlib.blake2b(json.dumps([CACHE_VERSION, key, *parts]).encode(), digest_size=8)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_")[:60] or "tokens"
    return f"{slug}-{digest.hexdigest()}"


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Call `write(tmp_path)` on a temp file next to `path`, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the whole new one
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_npy(path: Path, array: np.ndarray) -> None:
    """Save `array` as .npy atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object, so np.save does not append ".npy"
            np.save(f, array)

    atomic_write(path, write)


def tokenize_splits(
    corpus: Corpus, tokenizer: Tokenizer, cache_dir: Path, key: str
) -> dict[str, np.ndarray]:
    """Per split, the documents' tokens with `eos_id` after each, cached; memory-mapped arrays."""
    name = cache_name(key, tokenizer.fingerprint, corpus.fingerprint())
    out: dict[str, np.ndarray] = {}
    for split, docs in corpus.splits.items():
        if not docs:  # nothing to tokenize (a synthetic task generates its rows)
            out[split] = np.zeros(0, dtype=token_dtype(tokenizer.vocab_size))
            continue
        path = Path(cache_dir) / f"{name}.{split}.npy"
        cached = read_cached_tokens(path, tokenizer.vocab_size) if path.exists() else None
        if cached is None:
            with cache_lock(path):
                if path.exists():  # made by another job while this one waited
                    cached = read_cached_tokens(path, tokenizer.vocab_size)
                if cached is None:
                    log.info(
                        "tokenizing the %s split: %s documents (once; cached in %s)",
                        split,
                        f"{len(docs):,}",
                        path.parent,
                    )
                    save_npy(path, tokenizer.encode_stream(docs))
                    cached = np.load(path, mmap_mode="r")
        out[split] = cached
    return out


def read_cached_tokens(path: Path, vocab_size: int) -> np.ndarray | None:
    """The cached token stream at ``path``, memory-mapped; None when it is damaged (set aside):
    unreadable, not a 1-D array of the vocabulary's dtype, or holding an id past the vocabulary."""
    try:
        tokens = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as e:
        set_aside(path, first_line(e))
        return None
    want = np.dtype(token_dtype(vocab_size))
    if tokens.ndim != 1 or tokens.dtype != want:
        problem = f"a {tokens.dtype} array of shape {tokens.shape}, not 1-D {want}"
    elif len(tokens) and int(tokens.max()) >= vocab_size:
        problem = f"token id {int(tokens.max())} past the vocabulary of {vocab_size}"
    else:
        return tokens
    del tokens  # unmapped before the rename
    set_aside(path, problem)
    return None


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

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 (inputs, targets) of shape (batch_size, seq_len); targets = inputs shifted by one."""
        # A fresh generator seeded by (seed, step): resuming at step k needs no saved RNG state.
        rng = np.random.default_rng([self.seed, step])
        starts = rng.integers(0, len(self.tokens) - self.seq_len, size=self.batch_size)
        windows = torch.from_numpy(self.tokens[starts[:, None] + self._span].astype(np.int64))
        # contiguous so callers can .view(-1) them for the loss
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


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
