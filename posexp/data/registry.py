"""Corpus type and the dataset registry: a dataset is one module that registers a loader by name."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from posexp.errors import PosexpError

SPLITS = ("train", "val", "test")
KINDS = ("lm", "pairs", "synthetic")

Pairs = list[tuple[str, str]]


@dataclass
class Corpus:
    """Text split into train/val/test documents; parallel corpora also carry (source, target) pairs."""

    splits: dict[str, list[str]]
    pairs: dict[str, Pairs] | None = None
    kind: str = "lm"
    source: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    task: Any = None  # kind "synthetic": the generator of its instances (posexp/data/synthetic)
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if set(self.splits) != set(SPLITS):
            raise ValueError(f"corpus splits must be {SPLITS}, got {sorted(self.splits)}")
        if self.kind not in KINDS:
            raise ValueError(f"corpus kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == "pairs") != (self.pairs is not None):
            raise ValueError("a 'pairs' corpus needs pairs, an 'lm' corpus must not have them")
        if (self.kind == "synthetic") != (self.task is not None):
            raise ValueError("a 'synthetic' corpus needs a task, other kinds must not have one")

    def fingerprint(self) -> str:
        """Content hash of every split (and pair), so caches follow the data, not the config."""
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=16)
            # Length-prefix every string so no two different corpora can hash the same.
            for split in SPLITS:
                h.update(f"\x00{split}:{len(self.splits[split])}".encode())
                for doc in self.splits[split]:
                    b = doc.encode("utf-8")
                    h.update(len(b).to_bytes(8, "little") + b)
                for src, tgt in (self.pairs or {}).get(split, []):
                    for b in (src.encode("utf-8"), tgt.encode("utf-8")):
                        h.update(len(b).to_bytes(8, "little") + b)
            self._fingerprint = h.hexdigest()
        return self._fingerprint


Loader = Callable[..., Corpus]
# Checks a dataset declares for itself: fn(params, seq_len) raising PosexpError; it returns the
# tokens of its longest training row when rows are shorter than seq_len (synthetic tasks).
Check = Callable[[dict[str, Any], "int | None"], "int | None"]
_DATASETS: dict[str, Loader] = {}
_CHECKS: dict[str, Check] = {}
_TOKENIZERS: dict[str, tuple[str, ...]] = {}


def register_dataset(name: str, check: Check | None = None,
                     tokenizers: tuple[str, ...] | None = None) -> Callable[[Loader], Loader]:
    """Decorator: register `fn(**params) -> Corpus` as the dataset called `name`.

    ``check(params, seq_len)`` validates what a signature cannot (value ranges, fit in the
    training length); ``tokenizers`` limits the tokenizers it works with.
    """

    def deco(fn: Loader) -> Loader:
        if name in _DATASETS:
            raise ValueError(f"dataset {name!r} registered twice")
        _DATASETS[name] = fn
        if check is not None:
            _CHECKS[name] = check
        if tokenizers is not None:
            _TOKENIZERS[name] = tokenizers
        return fn

    return deco


def dataset_names() -> list[str]:
    """Names of all registered datasets, sorted."""
    return sorted(_DATASETS)


def check_params(
    kind: str, name: str, fn: Callable[..., Any], params: dict[str, Any], skip: tuple[str, ...] = ()
) -> None:
    """Raise PosexpError for a key `fn` does not accept or a required key that is absent."""
    sig = inspect.signature(fn).parameters
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values())
    allowed = [p for p in sig if p not in skip and sig[p].kind is not inspect.Parameter.VAR_KEYWORD]
    for key in allowed:
        if sig[key].default is inspect.Parameter.empty and key not in params:
            raise PosexpError(f"missing parameter {key!r} for {kind} {name!r}; set {kind}.{key}")
    for key in params:
        if key not in allowed and not open_ended:  # **options: the loader's check names them
            raise PosexpError(
                f"unknown parameter {key!r} for {kind} {name!r}; allowed: {', '.join(allowed) or '(none)'}"
            )


def check_dataset(source: str, params: dict[str, Any], tokenizer: str | None = None,
                  seq_len: int | None = None) -> int | None:
    """Refuse an unknown dataset name, parameters its loader does not take, or values its own
    check refuses (with the run's tokenizer and training length, when given), before loading.

    Returns the tokens of the longest training row when the dataset's rows are shorter than
    seq_len (a synthetic task), else None."""
    if source not in _DATASETS:
        raise PosexpError(f"unknown data {source!r}; allowed: {', '.join(dataset_names())}")
    check_params("data", source, _DATASETS[source], params)
    if tokenizer is not None and source in _TOKENIZERS and tokenizer not in _TOKENIZERS[source]:
        raise PosexpError(f"data={source} needs tokenizer {' or '.join(_TOKENIZERS[source])} "
                          f"(one token per character), got tokenizer={tokenizer}")
    return _CHECKS[source](params, seq_len) if source in _CHECKS else None


def load_corpus(source: str, **params: Any) -> Corpus:
    """Load the dataset registered as `source`, passing `params` to its loader."""
    check_dataset(source, params)
    corpus = _DATASETS[source](**params)
    corpus.source = source
    corpus.params = dict(params)
    return corpus
