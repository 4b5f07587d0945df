"""Batches of (source, target) pairs for a decoder-only model: ``source <sep> target <eos>``.

Each row holds ONE example, right-padded with ``pad_id``, so the causal mask alone keeps examples
apart. A row has at most seq_len + 1 tokens (inputs and shifted targets come from it); an example
too long for that loses the END of its source first, then, only if the target alone does not fit,
the end of its target (eos included). Targets are -100 (no loss) at padding always, and with
``loss_on="target"`` also at every position predicting a source token or the sep; with
``loss_on="all"`` the source and sep predictions carry loss too.
"""

from __future__ import annotations

import hashlib
import logging
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from posexp.checks import positive_int
from posexp.data.tokenizers import Tokenizer, token_dtype
from posexp.data.tokens import atomic_write, cache_name
from posexp.errors import PosexpError, choose, first_line
from posexp.store.files import cache_lock, set_aside

log = logging.getLogger("posexp")

IGNORE = -100  # F.cross_entropy's default ignore_index
LOSS_ON = ("target", "all")


def pairs_fingerprint(pairs: Sequence[tuple[str, str]]) -> str:
    """Content hash of the pairs, length-prefixed so no two lists collide by concatenation."""
    h = hashlib.blake2b(digest_size=16)
    for src, tgt in pairs:
        for b in (src.encode("utf-8"), tgt.encode("utf-8")):
            h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def ragged(seqs: list[list[int]], dtype: type[np.unsignedinteger]) -> tuple[np.ndarray, np.ndarray]:
    """(flat ids, offsets): seqs[i] == flat[offsets[i]:offsets[i+1]]."""
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    flat = np.fromiter((i for s in seqs for i in s), dtype=dtype, count=int(offsets[-1]))
    return flat, offsets


PAIR_ARRAYS = ("src", "src_off", "tgt", "tgt_off")


def read_cached_pairs(path: Path, vocab_size: int) -> dict[str, np.ndarray] | None:
    """The cached pairs at ``path``; None when the file is damaged (set aside): unreadable, an
    array missing, offsets that do not span their tokens, or an id past the vocabulary."""
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        set_aside(path, first_line(e))
        return None
    problem = None
    if set(arrays) != set(PAIR_ARRAYS):
        problem = f"arrays {sorted(arrays)}, not {list(PAIR_ARRAYS)}"
    else:
        for side in ("src", "tgt"):
            ids, offsets = arrays[side], arrays[f"{side}_off"]
            if len(offsets) == 0 or int(offsets[-1]) != len(ids) or np.any(np.diff(offsets) < 0):
                problem = f"{side} offsets that do not span its {len(ids)} tokens"
            elif len(ids) and int(ids.max()) >= vocab_size:
                problem = f"token id {int(ids.max())} past the vocabulary of {vocab_size}"
    if problem is None:
        return arrays
    set_aside(path, problem)
    return None


def tokenize_pairs(
    pairs: Sequence[tuple[str, str]],
    tokenizer: Tokenizer,
    cache_dir: Path | None = None,
    key: str = "pairs",
) -> dict[str, np.ndarray]:
    """Sources and targets as ragged arrays (src, src_off, tgt, tgt_off), cached as .npz if asked."""
    if cache_dir is None:
        return encode_pairs(pairs, tokenizer)
    name = cache_name(key, tokenizer.fingerprint, pairs_fingerprint(pairs))
    path = Path(cache_dir) / f"{name}.pairs.npz"
    cached = read_cached_pairs(path, tokenizer.vocab_size) if path.exists() else None
    if cached is not None:
        return cached
    with cache_lock(path):
        if path.exists():  # made by another job while this one waited
            cached = read_cached_pairs(path, tokenizer.vocab_size)
            if cached is not None:
                return cached
        log.info(
            "tokenizing %s pairs (%s; once, cached in %s)", f"{len(pairs):,}", key, path.parent
        )
        arrays = encode_pairs(pairs, tokenizer)

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:  # a file object, so numpy does not append ".npz"
                np.savez(f, **arrays)

        atomic_write(path, write)
    return arrays


def encode_pairs(pairs: Sequence[tuple[str, str]], tokenizer: Tokenizer) -> dict[str, np.ndarray]:
    """Sources and targets as ragged arrays: src, src_off, tgt, tgt_off."""
    dtype = token_dtype(tokenizer.vocab_size)
    src, src_off = ragged(tokenizer.encode_batch([s for s, _ in pairs]), dtype)
    tgt, tgt_off = ragged(tokenizer.encode_batch([t for _, t in pairs]), dtype)
    return {"src": src, "src_off": src_off, "tgt": tgt, "tgt_off": tgt_off}


def collate_rows(
    examples: Sequence[tuple[list[int], list[int]]],
    tokenizer: Tokenizer,
    seq_len: int,
    loss_on: str = "target",
) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 (inputs, targets) of shape (len(examples), seq_len): one ``source <sep> target
    <eos>`` row per (source ids, target ids), truncated and masked as the module docstring says."""
    tok, width = tokenizer, seq_len + 1
    rows = np.full((len(examples), width), tok.pad_id, dtype=np.int64)
    labels = np.full((len(examples), width), IGNORE, dtype=np.int64)
    for r, (src, tgt) in enumerate(examples):
        keep = max(0, width - 2 - len(tgt))  # room left for the source: drop its end first
        seq = [*src[:keep], tok.sep_id, *tgt, tok.eos_id][:width]
        rows[r, : len(seq)] = seq
        first = 1 if loss_on == "all" else min(len(src), keep) + 1
        labels[r, first : len(seq)] = seq[first:]
    # Row position j predicts token j+1, so targets are the labels shifted left by one.
    return torch.from_numpy(rows[:, :-1].copy()), torch.from_numpy(labels[:, 1:].copy())


class PairBatches:
    """Random batches of one-example-per-row pairs; batch `step` depends only on (seed, step)."""

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        tokenizer: Tokenizer,
        batch_size: int,
        seq_len: int,
        seed: int,
        loss_on: str = "target",
        cache_dir: Path | None = None,
        key: str = "pairs",
    ) -> None:
        positive_int("batch_size", batch_size)
        positive_int("seq_len", seq_len)
        choose("data.loss_on", loss_on, LOSS_ON)
        if not pairs:
            raise PosexpError(
                "no (source, target) pairs to batch; allowed: a non-empty pairs split"
            )
        self.tokenizer, self.batch_size, self.seq_len = tokenizer, batch_size, seq_len
        self.seed, self.loss_on = seed, loss_on
        self.arrays = tokenize_pairs(pairs, tokenizer, cache_dir, key)

    def __len__(self) -> int:
        """Number of pairs."""
        return len(self.arrays["src_off"]) - 1

    def example(self, i: int) -> tuple[list[int], list[int]]:
        """Source and target ids of pair `i`."""
        a = self.arrays
        src = a["src"][a["src_off"][i] : a["src_off"][i + 1]].tolist()
        tgt = a["tgt"][a["tgt_off"][i] : a["tgt_off"][i + 1]].tolist()
        return src, tgt

    def encode_prompt(self, source: str) -> list[int]:
        """Generation prompt: source ids then sep; the model continues with the target."""
        return [*self.tokenizer.encode(source), self.tokenizer.sep_id]

    def collate(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 (inputs, targets) of shape (len(indices), seq_len) for the given pairs, in order."""
        examples = [self.example(int(i)) for i in indices]
        return collate_rows(examples, self.tokenizer, self.seq_len, self.loss_on)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Random batch number `step`: a fresh generator seeded by (seed, step), no saved state."""
        rng = np.random.default_rng([self.seed, step])
        n = len(self)
        idx = rng.choice(n, size=self.batch_size, replace=n < self.batch_size)
        return self.collate(idx.tolist())
