"""Corpus type and the dataset registry: a dataset is one module that registers a loader by name."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from posexp.errors import PosexpError

SPLITS = ("train", "val", "test")
KINDS = ("lm", "pairs")

Pairs = list[tuple[str, str]]


@dataclass
class Corpus:
    """Text split into train/val/test documents; parallel corpora also carry (source, target) pairs."""

    splits: dict[str, list[str]]
    pairs: dict[str, Pairs] | None = None
    kind: str = "lm"
    source: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if set(self.splits) != set(SPLITS):
            raise ValueError(f"corpus splits must be {SPLITS}, got {sorted(self.splits)}")
        if self.kind not in KINDS:
            raise ValueError(f"corpus kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == "pairs") != (self.pairs is not None):
            raise ValueError("a 'pairs' corpus needs pairs, an 'lm' corpus must not have them")

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
_DATASETS: dict[str, Loader] = {}


def register_dataset(name: str) -> Callable[[Loader], Loader]:
    """Decorator: register `fn(**params) -> Corpus` as the dataset called `name`."""

    def deco(fn: Loader) -> Loader:
        if name in _DATASETS:
            raise ValueError(f"dataset {name!r} registered twice")
        _DATASETS[name] = fn
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
    allowed = [p for p in sig if p not in skip]
    for key in allowed:
        if sig[key].default is inspect.Parameter.empty and key not in params:
            raise PosexpError(f"missing parameter {key!r} for {kind} {name!r}; set {kind}.{key}")
    for key in params:
        if key not in allowed:
            raise PosexpError(
                f"unknown parameter {key!r} for {kind} {name!r}; allowed: {', '.join(allowed) or '(none)'}"
            )


def check_dataset(source: str, params: dict[str, Any]) -> None:
    """Refuse an unknown dataset name, or parameters its loader does not take, before loading."""
    if source not in _DATASETS:
        raise PosexpError(f"unknown data {source!r}; allowed: {', '.join(dataset_names())}")
    check_params("data", source, _DATASETS[source], params)


def load_corpus(source: str, **params: Any) -> Corpus:
    """Load the dataset registered as `source`, passing `params` to its loader."""
    check_dataset(source, params)
    corpus = _DATASETS[source](**params)
    corpus.source = source
    corpus.params = dict(params)
    return corpus
