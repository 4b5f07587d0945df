"""Streaming tokenization of one split into memory-mapped token files, shard by shard, resumable.

The documents are read ``SHARD_BYTES`` of text at a time; each group (a shard) is encoded by a
worker process (one per core by default) with the tokenizer's batch encoder and written at once,
atomically, as ``shard-NNNNNN.npz`` (its tokens, ``eos`` after each document, and each
document's token count) into a ``.parts`` folder beside the cache entry. A killed run leaves
whole shards only; the next run reads past them without encoding them again. When every shard is
there, they are joined into the split's token file (``.npy``) and its document starts
(``.starts.npy``, int64: where each document begins), both written atomically, and the shards
are removed. Peak memory is a few shards per process, whatever the corpus size: no step holds
the corpus, its documents or its tokens whole.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from posexp.data.documents import Documents, batches
from posexp.data.tokenizers import Tokenizer, token_dtype
from posexp.errors import PosexpError

SHARD_BYTES = 8 << 20  # text per shard: a few MB, so a killed run loses little
log = logging.getLogger("posexp")


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


def default_workers() -> int:
    """One tokenizer process per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def shard_path(parts: Path, index: int) -> Path:
    """The file of shard ``index``."""
    return parts / f"shard-{index:06d}.npz"


def write_shard(path: Path, tokens: np.ndarray, lengths: np.ndarray) -> None:
    """Save one shard atomically: a reader sees the whole file or none."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, tokens=tokens, lengths=lengths)

    atomic_write(path, write)


def read_shard(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(tokens, lengths) of a finished shard; None when it is unreadable or inconsistent."""
    try:
        with np.load(path, allow_pickle=False) as z:
            tokens, lengths = z["tokens"], z["lengths"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if tokens.ndim != 1 or lengths.ndim != 1 or int(lengths.sum()) != len(tokens):
        return None
    return tokens, lengths


_WORKER: dict[str, Any] = {}


def _start_worker(tokenizer: Tokenizer) -> None:
    # One process per core already: the Rust encoder's own threads would only compete.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER["tokenizer"] = tokenizer


def _encode(job: tuple[str, list[str]]) -> tuple[int, int]:
    """Worker: encode one shard's documents and save it; (tokens, documents) it holds."""
    path, docs = job
    tokens, lengths = _WORKER["tokenizer"].encode_documents(docs)
    write_shard(Path(path), tokens, lengths)
    return len(tokens), len(lengths)


class Progress:
    """A progress bar of text read (MB/s, ETA from the source size) and tokens written."""

    def __init__(self, total: int | None, desc: str) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total,
            desc=desc,
            unit="B",
            unit_scale=True,
            unit_divisor=1 << 20,
            disable=None,  # a terminal only
            file=sys.stderr,
            dynamic_ncols=True,
        )
        self.tokens = 0

    def update(self, nbytes: int, tokens: int) -> None:
        """``nbytes`` more text read, ``tokens`` more tokens."""
        self.tokens += tokens
        self.bar.set_postfix_str(f"{self.tokens:,} tokens", refresh=False)
        self.bar.update(nbytes)

    def close(self) -> None:
        """End the bar."""
        self.bar.close()


def encode_shards(
    docs: Sequence[str],
    tokenizer: Tokenizer,
    parts: Path,
    budget: int | None,
    workers: int,
    desc: str,
) -> list[int]:
    """Encode ``docs`` into shards under ``parts`` (those already there are kept), stopping
    once ``budget`` tokens are written in order; the token count of each shard, in order."""
    parts.mkdir(parents=True, exist_ok=True)
    total = docs.nbytes() if isinstance(docs, Documents) else sum(len(d) for d in docs)
    bar = Progress(total, desc)
    counts: list[int] = []
    done = 0  # tokens of the shards counted so far, in order

    def enough() -> bool:
        return budget is not None and done >= budget

    try:
        if workers <= 1 or (total is not None and total <= SHARD_BYTES):  # one shard: no pool
            for index, group in enumerate(batches(docs, SHARD_BYTES)):
                path = shard_path(parts, index)
                kept = read_shard(path)
                if kept is None:
                    tokens, lengths = tokenizer.encode_documents(group)
                    write_shard(path, tokens, lengths)
                    kept = tokens, lengths
                counts.append(len(kept[0]))
                done += counts[-1]
                bar.update(sum(len(d) for d in group), counts[-1])
                if enough():
                    break
            return counts
        import multiprocessing

        context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start_worker, initargs=(tokenizer,)
        ) as pool:
            pending: deque[tuple[Future[tuple[int, int]] | int, int]] = deque()

            def settle() -> None:
                nonlocal done
                job, nbytes = pending.popleft()
                n = job if isinstance(job, int) else job.result()[0]
                counts.append(n)
                done += n
                bar.update(nbytes, n)

            for index, group in enumerate(batches(docs, SHARD_BYTES)):
                path = shard_path(parts, index)
                kept = read_shard(path)
                nbytes = sum(len(d) for d in group)
                if kept is not None:
                    pending.append((len(kept[0]), nbytes))
                else:
                    pending.append((pool.submit(_encode, (str(path), group)), nbytes))
                del group
                # A bounded queue: the reader stays at most two shards per worker ahead.
                while len(pending) > 2 * workers or (pending and _ready(pending[0][0])):
                    settle()
                if enough():
                    break
            while pending and not enough():
                settle()
            for job, _ in pending:
                if not isinstance(job, int):
                    job.cancel()
        return counts
    finally:
        bar.close()


def _ready(job: Future[Any] | int) -> bool:
    return isinstance(job, int) or job.done()


def npy_header(f: Any, dtype: np.dtype, n: int) -> None:
    """Write the header of a 1-D .npy array of ``n`` ``dtype`` items to ``f``."""
    np.lib.format.write_array_header_1_0(
        f, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n,)}
    )


def shard_arrays(parts: Path, n_shards: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(tokens, lengths) of shards 0..n_shards-1, one at a time."""
    for index in range(n_shards):
        found = read_shard(shard_path(parts, index))
        if found is None:  # removed or damaged since it was counted: a programming error
            raise PosexpError(
                f"token shard {shard_path(parts, index)} vanished while joining; run again"
            )
        yield found


def join_shards(
    parts: Path, counts: list[int], n: int, tokens_path: Path, starts_path: Path, dtype: Any
) -> None:
    """Write the first ``n`` tokens of the shards as one .npy (streamed, never held whole) and
    the start of each document that begins before ``n`` as another; the starts first, so a
    token file never stands without them."""

    def starts_of_shards() -> Iterator[np.ndarray]:
        at = 0
        for _, lengths in shard_arrays(parts, len(counts)):
            begin = at + np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)])
            yield begin[begin < n].astype(np.int64)
            at += int(lengths.sum())
            if at >= n:
                return

    def write_starts(tmp: str) -> None:
        kept = sum(len(b) for b in starts_of_shards())  # counted first: the header needs it
        with open(tmp, "wb") as f:
            npy_header(f, np.dtype(np.int64), kept)
            for begin in starts_of_shards():
                f.write(begin.tobytes())

    def write_tokens(tmp: str) -> None:
        with open(tmp, "wb") as f:
            npy_header(f, np.dtype(dtype), n)
            left = n
            for tokens, _ in shard_arrays(parts, len(counts)):
                part = tokens[:left].astype(dtype, copy=False)
                f.write(part.tobytes())
                left -= len(part)
                if left <= 0:
                    break

    atomic_write(starts_path, write_starts)
    atomic_write(tokens_path, write_tokens)


def remove_parts(parts: Path) -> None:
    """Delete a split's shards once joined."""
    for p in parts.glob("shard-*.npz"):
        p.unlink(missing_ok=True)
    for p in parts.glob("*.tmp"):
        p.unlink(missing_ok=True)
    try:
        parts.rmdir()
    except OSError:
        pass  # something else is in it: leave it


def tokenize_split(
    docs: Sequence[str],
    tokenizer: Tokenizer,
    parts: Path,
    tokens_path: Path,
    starts_path: Path,
    split: str,
    budget: int | None = None,
    workers: int | None = None,
) -> None:
    """Tokenize one split's ``docs`` into ``tokens_path`` (+ ``starts_path``): the first
    ``budget`` tokens when given (a one-line error when the split has fewer)."""
    workers = default_workers() if workers is None else workers
    counts = encode_shards(
        docs, tokenizer, parts, budget, workers, desc=f"tokenizing {split} ({workers} proc)"
    )
    total = sum(counts)
    if not total:
        raise PosexpError(f"the {split} split has no documents; give data with text")
    if budget is not None and total < budget:
        raise PosexpError(
            f"data.max_tokens asks for {budget:,} {split} tokens, but the {split} split has only "
            f"{total:,} (with this tokenizer); allowed: up to {total}, or null for all"
        )
    n = total if budget is None else budget
    join_shards(parts, counts, n, tokens_path, starts_path, token_dtype(tokenizer.vocab_size))
    remove_parts(parts)
