"""Tokenizers, registered by name: ``byte`` (UTF-8 bytes) and ``bpe`` (byte-level BPE).

Every tokenizer has the four specials pad, bos, eos, sep; ``decode`` drops them. ``encode_stream``
is the fast path for whole corpora: documents concatenated with ``eos_id`` after each, as a
numpy array of ``token_dtype(vocab_size)``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posexp import checks
from posexp.data.registry import Corpus
from posexp.errors import PosexpError, first_line
from posexp.registry import Registry
from posexp.store.files import cache_lock, set_aside

SPECIALS = ("<pad>", "<bos>", "<eos>", "<sep>")
# A BPE vocabulary's documented bounds: 256 bytes + the specials, up to 2**20 tokens. A byte-level
# BPE of a text this project trains on ends far below the cap (KJV: ~20k), and a larger request
# only makes the trainer reserve memory for it (10**9 asks for tens of GB, then panics).
VOCAB_MIN, VOCAB_MAX = 256 + len(SPECIALS), 2**20
# Text a BPE learns its merges from by default: the first 100 MB of the train split. Merges
# settle long before that on natural text, and training time and memory grow with it.
TRAIN_BYTES = 100_000_000

log = logging.getLogger("posexp")


def token_dtype(vocab_size: int) -> type[np.unsignedinteger]:
    """Smallest unsigned dtype that holds every id: uint16 below 65,536 ids, else uint32."""
    return np.uint16 if vocab_size < 65536 else np.uint32


class Tokenizer(ABC):
    """Text <-> ids, with pad/bos/eos/sep specials; `fingerprint` identifies it for caches."""

    name: str
    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    sep_id: int
    fingerprint: str
    # The file it was read from (a learned vocabulary), which a run keeps as its own; None when
    # the tokenizer is fixed (bytes).
    file: Path | None = None

    @property
    def special_ids(self) -> tuple[int, int, int, int]:
        """(pad, bos, eos, sep) ids."""
        return self.pad_id, self.bos_id, self.eos_id, self.sep_id

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Ids of `text`, with no specials added."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, skipping special ids."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text."""
        return [self.encode(t) for t in texts]

    def encode_stream(self, docs: Sequence[str]) -> np.ndarray:
        """All `docs` encoded and concatenated, `eos_id` after each, as a 1-D `token_dtype` array."""
        return self.encode_documents(docs)[0]

    def encode_documents(self, docs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(``encode_stream(docs)``, each document's token count with its eos, int64)."""
        dtype = token_dtype(self.vocab_size)
        encoded = self.encode_batch(docs)
        lengths = np.fromiter((len(ids) + 1 for ids in encoded), np.int64, len(encoded))
        tokens = np.empty(int(lengths.sum()), dtype)
        at = 0
        for ids in encoded:
            tokens[at : at + len(ids)] = ids
            at += len(ids)
            tokens[at] = self.eos_id
            at += 1
        return tokens, lengths


class ByteTokenizer(Tokenizer):
    """Ids 0..255 are UTF-8 bytes; 256..259 are pad, bos, eos, sep."""

    name = "byte"
    vocab_size = 260
    pad_id, bos_id, eos_id, sep_id = 256, 257, 258, 259
    fingerprint = "byte-v1"

    def encode(self, text: str) -> list[int]:
        """UTF-8 bytes of `text`."""
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        """UTF-8 decode of the byte ids; broken sequences become U+FFFD."""
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def encode_documents(self, docs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised: the documents' bytes joined once, an eos inserted after each."""
        encoded = [doc.encode("utf-8") for doc in docs]
        sizes = np.fromiter((len(b) for b in encoded), np.int64, len(encoded))
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.uint16)
        tokens = np.insert(data, np.cumsum(sizes), self.eos_id)
        return tokens, sizes + 1


class BpeTokenizer(Tokenizer):
    """Byte-level BPE (HF `tokenizers`); specials take ids 0..3 in the order pad, bos, eos, sep."""

    name = "bpe"

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self._tok = HFTokenizer.from_file(str(path))
        self.file = Path(path)
        self.vocab_size = self._tok.get_vocab_size()
        self.pad_id, self.bos_id, self.eos_id, self.sep_id = (
            self._tok.token_to_id(s) for s in SPECIALS
        )
        self.fingerprint = "bpe-" + hashlib.blake2b(path.read_bytes(), digest_size=8).hexdigest()

    def encode(self, text: str) -> list[int]:
        """BPE ids of `text`."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, specials skipped."""
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Encodes in parallel in Rust (without the character offsets, which nothing here uses)."""
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        return [e.ids for e in encode(list(texts), add_special_tokens=False)]


def sample(texts: Iterable[str], max_bytes: int | None) -> Iterator[list[str]]:
    """The first documents of ``texts`` up to ``max_bytes`` of UTF-8 (all when None), in batches:
    what the BPE trainer reads, streamed."""
    taken, batch = 0, []
    for text in texts:
        if max_bytes is not None and taken >= max_bytes:
            break
        size = len(text.encode("utf-8"))
        if max_bytes is not None and taken + size > max_bytes:
            text = text.encode("utf-8")[: max_bytes - taken].decode("utf-8", errors="ignore")
            size = max_bytes - taken
        taken += size
        batch.append(text)
        if len(batch) >= 1000:
            yield batch
            batch = []
    if batch:
        yield batch


def train_bpe(
    texts: Iterable[str], vocab_size: int, path: Path, max_bytes: int | None = None
) -> None:
    """Train a byte-level BPE on the first ``max_bytes`` of ``texts`` (all when None), streamed,
    and save it to `path` atomically."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sample(texts, max_bytes), trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        tok.save(tmp)
        os.replace(tmp, path)  # atomic: a concurrent run never reads a half-written file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


TokenizerBuilder = Callable[..., Tokenizer]
TOKENIZERS: Registry[TokenizerBuilder] = Registry("tokenizer")


def register_tokenizer(name: str) -> Callable[[TokenizerBuilder], TokenizerBuilder]:
    """Decorator: register `fn(corpus, cache_dir, **params) -> Tokenizer` as `name`."""
    return TOKENIZERS.register(name)


def tokenizer_names() -> list[str]:
    """Names of all registered tokenizers, sorted."""
    return sorted(TOKENIZERS)


@register_tokenizer("byte")
def build_byte(corpus: Corpus, cache_dir: Path) -> Tokenizer:
    """The byte tokenizer; needs no training."""
    return ByteTokenizer()


def saved_bpe(path: Path) -> Tokenizer | None:
    """The BPE cached at ``path``; None if there is none, or it is damaged (set aside)."""
    if not path.exists():
        return None
    try:
        return BpeTokenizer(path)
    except Exception as e:  # noqa: BLE001  damaged: trained again
        set_aside(path, first_line(e))
        return None


@register_tokenizer("bpe")
def build_bpe(
    corpus: Corpus, cache_dir: Path, vocab_size: int = 4096, train_bytes: int | None = TRAIN_BYTES
) -> Tokenizer:
    """Byte-level BPE trained on the first ``train_bytes`` of `corpus.splits["train"]` (all of
    it when None), cached by (that text, vocab, sample size, specials)."""
    check_vocab_size(vocab_size)
    check_train_bytes(train_bytes)
    # Keyed by the train documents alone (what it learns from), so two datasets with the same
    # training text (wyc2kjv and wyc2kjv_text) share one vocabulary and a run may start from the
    # other's weights.
    key = json.dumps(
        [corpus.train_text_fingerprint(), vocab_size, SPECIALS, "bytelevel-v1"]
        + ([] if train_bytes is None else [train_bytes])
    )
    digest = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    path = Path(cache_dir) / f"bpe-{vocab_size}-{digest}.json"
    tokenizer = saved_bpe(path)
    if tokenizer is None:
        with cache_lock(path):
            tokenizer = saved_bpe(path)  # trained by another job while this one waited
            if tokenizer is None:
                docs = corpus.splits["train"]
                log.info(
                    "training a %d-token byte-level BPE on %s of the train documents "
                    "(once; cached in %s)",
                    vocab_size,
                    "all" if train_bytes is None else f"the first {train_bytes / 1e6:g} MB",
                    path.parent,
                )
                started = time.perf_counter()
                train_bpe(docs, vocab_size, path, train_bytes)
                log.info("BPE trained in %.1fs", time.perf_counter() - started)
                tokenizer = BpeTokenizer(path)
    if tokenizer.vocab_size < vocab_size:  # the training text ran out of pairs to merge
        log.info(
            "the training text gives a BPE of %d tokens, fewer than tokenizer.vocab_size=%d; "
            "the model uses %d",
            tokenizer.vocab_size,
            vocab_size,
            tokenizer.vocab_size,
        )
    return tokenizer


def check_train_bytes(value: Any) -> int | None:
    """``tokenizer.train_bytes``: a positive number of bytes of text, or null for all of it."""
    return checks.integer("tokenizer.train_bytes", value, low=1, allow_none=True)


def check_vocab_size(value: Any) -> int:
    """``tokenizer.vocab_size`` in [VOCAB_MIN, VOCAB_MAX], else a one-line error naming the bounds."""
    return checks.integer("tokenizer.vocab_size", value, low=VOCAB_MIN, high=VOCAB_MAX)


# Value checks of a tokenizer's parameters, run where the config is built (before any data work).
PARAM_CHECKS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "bpe": {"vocab_size": check_vocab_size, "train_bytes": check_train_bytes}
}
# Tokenizers whose vocabulary is learned from the run's training text: the same settings on other
# training text give other token ids, so a run started from another's weights must keep that text.
LEARNED_VOCABULARY = frozenset({"bpe"})


def check_tokenizer(name: str, params: dict[str, Any]) -> None:
    """Refuse an unknown tokenizer name, or parameters its builder does not take."""
    checks.takes_params(
        "tokenizer", name, TOKENIZERS.get(name), params, skip=("corpus", "cache_dir")
    )
    for key, check in PARAM_CHECKS.get(name, {}).items():
        if key in params:
            check(params[key])


def saved_tokenizer(path: Path) -> Tokenizer:
    """The learned tokenizer a run keeps in its dir (``tokenizer.json``), as it trained with it."""
    try:
        return BpeTokenizer(path)
    except Exception as e:  # noqa: BLE001  the tokenizers library raises plain Exception
        raise PosexpError(
            f"the run's tokenizer {str(path)!r} is unreadable ({first_line(e)})"
        ) from None


def build_tokenizer(name: str, corpus: Corpus, cache_dir: Path, **params: Any) -> Tokenizer:
    """Build (or load from `cache_dir`) the tokenizer registered as `name` for `corpus`."""
    check_tokenizer(name, params)
    return TOKENIZERS[name](corpus, Path(cache_dir), **params)
