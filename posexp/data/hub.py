"""A dataset from the Hugging Face hub (or a local dataset folder) via ``datasets.load_dataset``.

Params: ``name`` (hub id or local folder), ``config`` (hub config name), ``column`` (the text
column, default "text"), ``split_map`` (our split -> the dataset's split name, e.g.
``{"val": "validation"}``; by default val is the first of validation/valid/val/dev and train/test
are themselves). Every non-blank row of ``column``, stripped, is one document. A split the dataset
lacks is carved off the end of train (5% each; ``posexp.data.splits.carve_tail``). The rows are
read in batches when the data is tokenized, not held as Python strings.

``streaming=True`` reads the dataset with datasets' streaming (nothing is downloaded whole or
converted to Arrow first: for corpora larger than the disk, or a ``data.max_tokens`` sample of
one). A split it lacks is then carved off the *start* of train, ``carve_docs`` documents each (val
first, then test), as the end of a stream is not known before it is read.

Offline it fails fast with one line: when HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set, or when a
3 s HTTP probe of the hub endpoint (proxy variables honoured) gets no answer, it only looks in the
local datasets cache (so a cached dataset still loads) instead of letting the hub client retry
for ~25 s.
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from posexp.data.documents import Documents, RowDocuments, Slice, TailSplit
from posexp.data.registry import SPLITS, Corpus, register_dataset
from posexp.errors import PosexpError

PROBE_TIMEOUT_S = 3.0
DEFAULT_SPLIT_NAMES = {
    "train": ("train",),
    "val": ("validation", "valid", "val", "dev"),
    "test": ("test",),
}
_TRUE = {"1", "ON", "YES", "TRUE"}
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def offline_by_env() -> bool:
    """True when the environment asks for Hugging Face offline mode (read now, not at import)."""
    return any(os.environ.get(v, "").upper() in _TRUE for v in _OFFLINE_VARS)


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True if the hub endpoint answers an HTTP HEAD (any status) within `timeout` seconds."""
    from huggingface_hub import constants

    ok: list[bool] = []

    def probe() -> None:
        # urllib honours the *_PROXY variables like the hub client does.
        request = urllib.request.Request(constants.ENDPOINT, method="HEAD")
        try:
            urllib.request.urlopen(request, timeout=timeout).close()
            ok.append(True)
        except urllib.error.HTTPError:
            ok.append(True)  # an HTTP error status still proves the server is reachable
        except (OSError, ValueError):
            pass

    # In a thread because the DNS lookup ignores the socket timeout and can stall far longer.
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


@contextmanager
def offline_mode(enabled: bool) -> Iterator[None]:
    """Temporarily force datasets/huggingface_hub offline; they read the env only at import."""
    if not enabled:
        yield
        return
    import datasets.config
    from huggingface_hub import constants

    saved = (
        datasets.config.HF_HUB_OFFLINE,
        datasets.config.HF_DATASETS_OFFLINE,
        constants.HF_HUB_OFFLINE,
    )
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        (
            datasets.config.HF_HUB_OFFLINE,
            datasets.config.HF_DATASETS_OFFLINE,
            constants.HF_HUB_OFFLINE,
        ) = saved


def one_line(e: BaseException, limit: int = 160) -> str:
    """`Type: first line of message`, shortened, for embedding in a one-line error."""
    lines = str(e).strip().splitlines()
    msg = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def fetch(name: str, config: str | None, streaming: bool = False) -> Any:
    """`datasets.load_dataset(name, config)`, with every failure turned into one PosexpError line."""
    import datasets

    local = Path(name).exists()
    offline = local or offline_by_env() or not hub_reachable()
    try:
        with offline_mode(offline):
            return datasets.load_dataset(name, config, streaming=streaming)
    except Exception as e:  # the hub client raises many unrelated types; all are user-facing here
        if isinstance(e, datasets.exceptions.DatasetNotFoundError) and not offline:
            raise PosexpError(
                f"dataset {name!r} not found on the Hugging Face hub ({one_line(e)}); check data.name"
            ) from None
        if offline and not local:
            # We forced offline mode, so the inner message only says so; name the real cause.
            why = "HF_HUB_OFFLINE is set" if offline_by_env() else "no connection to the hub"
            raise PosexpError(
                f"cannot reach the Hugging Face hub to load dataset {name!r} ({why}, and it is "
                "not in the local datasets cache); use data=text data.files=[...] for local files"
            ) from None
        if isinstance(e, (ConnectionError, TimeoutError)):
            raise PosexpError(
                f"cannot reach the Hugging Face hub to load dataset {name!r} ({one_line(e)}); "
                "use data=text data.files=[...] for local files"
            ) from None
        raise PosexpError(
            f"cannot load dataset {name!r} with config {config!r} ({one_line(e)}); "
            "check data.name and data.config"
        ) from None


def pick_splits(available: list[str], split_map: Mapping[str, str] | None) -> dict[str, str]:
    """Our split -> the dataset's split name, for the splits the dataset has."""
    split_map = dict(split_map or {})
    for ours, theirs in split_map.items():
        if ours not in SPLITS:
            raise PosexpError(
                f"unknown split {ours!r} in data.split_map; allowed: {', '.join(SPLITS)}"
            )
        if theirs not in available:
            raise PosexpError(
                f"data.split_map maps {ours} to {theirs!r}, not a split of the dataset; "
                f"allowed: {', '.join(available)}"
            )
    out: dict[str, str] = {}
    for ours in SPLITS:
        theirs = split_map.get(ours) or next(
            (s for s in DEFAULT_SPLIT_NAMES[ours] if s in available), None
        )
        if theirs is not None:
            out[ours] = theirs
    if "train" not in out:
        raise PosexpError(
            f"the dataset has no train split; set data.split_map.train to one of: {', '.join(available)}"
        )
    return out


def columns_of(split: Any) -> list[str] | None:
    """The column names of a dataset split (None when a stream does not know them yet)."""
    names = getattr(split, "column_names", None)
    return list(names) if names is not None else None


@register_dataset("hub", kind="lm")
def load_hub(
    name: str,
    config: str | None = None,
    column: str = "text",
    split_map: Mapping[str, str] | None = None,
    streaming: bool = False,
    carve_docs: int = 1000,
) -> Corpus:
    """A hub dataset's `column` as documents; missing val/test are carved from train."""
    from posexp import checks

    checks.boolean("data.streaming", streaming)
    checks.positive_int("data.carve_docs", carve_docs)
    ds = fetch(name, config, streaming)
    chosen = pick_splits(list(ds.keys()), split_map)
    splits: dict[str, Documents] = {}
    for ours, theirs in chosen.items():
        columns = columns_of(ds[theirs])
        if columns is not None and column not in columns:
            raise PosexpError(
                f"column {column!r} is not in split {theirs!r} of dataset {name!r}; "
                f"allowed: {', '.join(columns)}"
            )
        key = f"{name}:{config}:{theirs}:{'stream' if streaming else 'arrow'}"
        splits[ours] = RowDocuments(ds[theirs], column, key)
    need = tuple(s for s in ("val", "test") if s not in splits)
    train = splits["train"]
    if need and streaming:
        for i, split in enumerate(need):
            splits[split] = Slice(train, i * carve_docs, (i + 1) * carve_docs)
        splits["train"] = Slice(train, len(need) * carve_docs, None)
    elif need:
        what = f"dataset {name!r}"
        for split in ("train", *need):
            splits[split] = TailSplit(train, split, need, what, "set data.split_map")
    return Corpus(splits=dict(splits), kind="lm")
