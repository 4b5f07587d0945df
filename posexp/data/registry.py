"""Corpus type and the dataset registry: a dataset is one module that registers a loader by name.

A dataset declares its corpus kind when it registers (``lm``, ``pairs``, ``synthetic``, ...);
the kind means nothing here: the training objective registered for it (posexp/objectives) gives
it one, so a new kind needs no edit in this package.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from posexp import checks
from posexp.data.documents import fingerprint_of
from posexp.errors import PosexpError
from posexp.registry import Registry

SPLITS = ("train", "val", "test")

Pairs = list[tuple[str, str]]


@dataclass
class Corpus:
    """Text split into train/val/test documents; parallel corpora also carry (source, target) pairs."""

    splits: dict[str, Sequence[str]]  # lists, or documents streamed (posexp.data.documents)
    pairs: dict[str, Pairs] | None = None
    kind: str = "lm"
    source: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    task: Any = None  # kind "synthetic": the generator of its instances (posexp/data/synthetic)
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if set(self.splits) != set(SPLITS):
            raise ValueError(f"corpus splits must be {SPLITS}, got {sorted(self.splits)}")
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"corpus kind must be a non-empty name, got {self.kind!r}")
        if (self.kind == "pairs") != (self.pairs is not None):
            raise ValueError("a 'pairs' corpus needs pairs, other kinds must not have them")
        if (self.kind == "synthetic") != (self.task is not None):
            raise ValueError("a 'synthetic' corpus needs a task, other kinds must not have one")

    def train_text_fingerprint(self) -> str:
        """Hash of the train documents alone: what a learned vocabulary is trained on (their
        content when in memory; for streamed files, their paths, sizes and times)."""
        return fingerprint_of(self.splits["train"])

    def fingerprint(self) -> str:
        """Hash of every split (and pair), so caches follow the data, not the config."""
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=16)
            for split in SPLITS:
                h.update(f"\x00{split}:{fingerprint_of(self.splits[split])}".encode())
                pairs = [t for pair in (self.pairs or {}).get(split, []) for t in pair]
                h.update(fingerprint_of(pairs).encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint


Loader = Callable[..., Corpus]
# Checks a dataset declares for itself: fn(params, seq_len) raising PosexpError; it returns the
# tokens of its longest training row when rows are shorter than seq_len (synthetic tasks).
Check = Callable[[dict[str, Any], "int | None"], "int | None"]
# The files (or other inputs) a dataset reads are there: checked for a run about to start, not
# for a saved run's config read back (its files may have moved since; it loads no data).
InputCheck = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Dataset:
    """A registered dataset: its loader, the kind of corpus it gives, and what it declares."""

    load: Loader
    kind: str
    check: Check | None = None
    tokenizers: tuple[str, ...] | None = None  # the tokenizers it works with; None: any
    check_inputs: InputCheck | None = None


DATASETS: Registry[Dataset] = Registry("data")


def register_dataset(
    name: str,
    *,
    kind: str,
    check: Check | None = None,
    tokenizers: tuple[str, ...] | None = None,
    check_inputs: InputCheck | None = None,
) -> Callable[[Loader], Loader]:
    """Decorator: register `fn(**params) -> Corpus` as the dataset called `name`, of corpus `kind`.

    ``check(params, seq_len)`` validates what a signature cannot (value ranges, fit in the
    training length); ``tokenizers`` limits the tokenizers it works with; ``check_inputs(params)``
    that what it reads is there (local files), before a run or any job of a sweep starts.
    """

    def deco(fn: Loader) -> Loader:
        DATASETS.add(name, Dataset(fn, kind, check, tokenizers, check_inputs))
        return fn

    return deco


def dataset_names() -> list[str]:
    """Names of all registered datasets, sorted."""
    return sorted(DATASETS)


def dataset_kind(source: str) -> str:
    """The corpus kind the dataset ``source`` declared (one-line error for an unknown name)."""
    return DATASETS.get(source).kind


# Settings every dataset takes, read by the token cache and the batches rather than its loader:
# max_tokens (a budget: the first N tokens of train, or {split: N}), workers (tokenizer
# processes; null: one per core), doc_mask (attention kept within a document in training).
TOKEN_PARAMS = ("max_tokens", "workers", "doc_mask")


def loader_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without the ``TOKEN_PARAMS``: what the dataset's loader takes."""
    return {k: v for k, v in params.items() if k not in TOKEN_PARAMS}


def token_budget(params: dict[str, Any]) -> dict[str, int | None]:
    """``data.max_tokens`` checked, per split: an integer budgets train; a mapping, each split it
    names; null, none."""
    value = params.get("max_tokens")
    if value is None or (not isinstance(value, dict) and not hasattr(value, "items")):
        spec = {"train": value}
    else:
        spec = dict(value)
        checks.known_keys("data.max_tokens", spec, SPLITS)
    return {
        split: checks.integer(
            f"data.max_tokens.{split}" if len(spec) > 1 or split != "train" else "data.max_tokens",
            spec.get(split),
            low=1,
            allow_none=True,
        )
        for split in SPLITS
    }


def check_token_params(params: dict[str, Any]) -> None:
    """Refuse bad values of the ``TOKEN_PARAMS``, naming the setting and what is allowed."""
    token_budget(params)
    checks.integer("data.workers", params.get("workers"), low=1, high=256, allow_none=True)
    checks.boolean("data.doc_mask", params.get("doc_mask", False))


def check_dataset(
    source: str,
    params: dict[str, Any],
    tokenizer: str | None = None,
    seq_len: int | None = None,
    inputs: bool = False,
) -> int | None:
    """Refuse an unknown dataset name, parameters its loader does not take, or values its own
    check refuses (with the run's tokenizer and training length, when given), before loading;
    with ``inputs``, also missing inputs (a run about to start).

    Returns the tokens of the longest training row when the dataset's rows are shorter than
    seq_len (a synthetic task), else None."""
    dataset = DATASETS.get(source)
    check_token_params(params)
    params = loader_params(params)
    checks.takes_params("data", source, dataset.load, params)
    if (
        tokenizer is not None
        and dataset.tokenizers is not None
        and tokenizer not in dataset.tokenizers
    ):
        raise PosexpError(
            f"data={source} needs tokenizer {' or '.join(dataset.tokenizers)} "
            f"(one token per character), got tokenizer={tokenizer}"
        )
    rows = dataset.check(params, seq_len) if dataset.check is not None else None
    if inputs and dataset.check_inputs is not None:
        dataset.check_inputs(params)
    return rows


def load_corpus(source: str, **params: Any) -> Corpus:
    """Load the dataset registered as `source`, passing `params` to its loader."""
    check_dataset(source, params)
    dataset = DATASETS[source]
    corpus = dataset.load(**loader_params(params))
    if corpus.kind != dataset.kind:  # a programming error in the loader, not a user's
        raise ValueError(
            f"data {source!r} registered as kind {dataset.kind!r} gave a {corpus.kind!r} corpus"
        )
    corpus.source = source
    corpus.params = dict(params)
    return corpus
