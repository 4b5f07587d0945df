"""Local text files as a language-model corpus, read with ``datasets.load_dataset("text")``.

``files`` are the train files; ``val_files`` / ``test_files`` are optional. A split given no files
is carved off the end of the train documents (5% each, at least one document; see
``posexp.data.splits.carve_tail``), so the split is fixed by the file contents and order.
A document is a whole file (``sample_by="document"``), a blank-line separated paragraph
(``"paragraph"``, the default) or a line (``"line"``); whitespace-only documents are dropped.
Paths may be glob patterns (sorted, for a stable order).
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posexp.data.registry import Corpus, register_dataset
from posexp.data.splits import carve_tail
from posexp.errors import PosexpError, choose

SAMPLE_BY = ("document", "paragraph", "line")
log = logging.getLogger("posexp")

NO_FILES = "data.files is empty; set data.files=[path.txt,...] to existing text files"
UNITS = {"document": "files", "paragraph": "blank-line separated paragraphs", "line": "lines"}


def split_hint(files: list[str], sample_by: str, need: tuple[str, ...]) -> str:
    """What can fix too few documents of ``files`` to carve the ``need``ed splits from: a finer
    ``sample_by`` only where it gives enough documents (it reads the files again), else more text."""
    enough = len(need) + 1  # carve_tail: one document each, and one left to train on
    advice = f"give {' and '.join(f'data.{s}_files' for s in need)}"
    for finer in SAMPLE_BY[SAMPLE_BY.index(sample_by) + 1 :]:
        n = len(read_documents(files, finer))
        if n >= enough:
            return f"{advice}, or data.sample_by={finer} ({n} documents)"
    return (
        f"{advice}, or more text: at least {enough} {UNITS[sample_by]} (each of "
        f"{'/'.join(need)} gets the last 5%, at least one, and needs more tokens than "
        "train.seq_len)"
    )


def resolve_files(files: str | Sequence[str] | None, key: str, read: bool = True) -> list[str]:
    """Expand globs and check every path is an existing file, naming the first bad one, and
    (``read``) that each is UTF-8 text."""
    if files is None:
        return []
    if isinstance(files, (str, Path)):
        files = [str(files)]
    out: list[str] = []
    for f in files:
        f = str(f)
        if any(c in f for c in "*?["):
            matches = sorted(p for p in glob.glob(f) if Path(p).is_file())
            if not matches:
                raise PosexpError(
                    f"no data file matches {f!r} ({key} must list existing text files)"
                )
            out.extend(matches)
        elif Path(f).is_file():
            out.append(f)
        elif Path(f).exists():
            what = "a folder" if Path(f).is_dir() else "not a regular file"
            raise PosexpError(f"data file {f!r} is {what} ({key} must list text files)")
        else:
            raise PosexpError(f"data file not found: {f!r} ({key} must list existing text files)")
    for f in out if read else ():
        check_text_file(f, key)
    return out


FILE_KEYS = ("files", "val_files", "test_files")


def absolute_files(params: dict[str, Any], base: str | Path) -> dict[str, Any]:
    """``params`` with each relative path (or glob) of its file lists made absolute against
    ``base`` (where the command was typed): a run's saved config then names the files it read,
    wherever it is evaluated or resumed from later."""
    out = dict(params)
    for key in FILE_KEYS:
        value = out.get(key)
        if value is None:
            continue
        paths = [value] if isinstance(value, (str, Path)) else list(value)
        out[key] = [os.path.join(base, str(p)) for p in paths]  # an absolute p stays as it is
    return out


def check_text(params: dict[str, Any], seq_len: int | None) -> None:
    """The settings of data=text a signature cannot check (where the config is built)."""
    choose("data.sample_by", params.get("sample_by", "paragraph"), SAMPLE_BY)


def check_text_inputs(params: dict[str, Any]) -> None:
    """The files data=text names exist (each job of a sweep checked before any starts); their
    contents are read, and checked, when the run loads them."""
    if not resolve_files(params.get("files", ()), "data.files", read=False):
        raise PosexpError(NO_FILES)
    for split in ("val", "test"):
        resolve_files(params.get(f"{split}_files"), f"data.{split}_files", read=False)


def check_text_file(path: str, key: str) -> None:
    """Refuse, naming the file, one that is empty, binary (NUL bytes) or not UTF-8 text."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, size = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            size += len(chunk)
            nul = chunk.find(b"\0")
            if nul >= 0:
                raise PosexpError(
                    f"data file {path!r} ({key}) looks binary: it has a NUL byte at "
                    f"offset {offset + nul}; data=text reads UTF-8 text"
                )
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                raise PosexpError(
                    f"data file {path!r} ({key}) is not UTF-8: byte 0x{chunk[e.start]:02x} at offset "
                    f"{offset + e.start}; convert it first, e.g. iconv -f latin1 -t utf-8"
                ) from None
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise PosexpError(
                f"data file {path!r} ({key}) is not UTF-8: it ends inside a multi-byte character"
            ) from None
    if not size:
        raise PosexpError(f"data file {path!r} ({key}) is empty")


def read_documents(files: list[str], sample_by: str) -> list[str]:
    """Documents of `files`, in file order, via the datasets "text" builder."""
    import datasets

    # Its "Generating train split" bars are noise beside posexp's own log ("tokenizing ...").
    datasets.disable_progress_bars()
    ds = datasets.load_dataset(
        "text", data_files={"train": files}, sample_by=sample_by, split="train"
    )
    return [doc.strip() for doc in ds["text"] if doc.strip()]


def say_overlaps(splits: dict[str, list[str]]) -> None:
    """Warn of a file read twice (listed twice, or in two splits): a validation or test split
    holding training text measures memory, not modelling."""
    where: dict[str, list[str]] = {}
    for split, paths in splits.items():
        for path in paths:
            where.setdefault(os.path.realpath(path), []).append(split)
    for path, found in where.items():
        if len(found) > 1:
            log.warning(
                "data file %s is read %d times (%s): %s",
                path,
                len(found),
                ", ".join(found),
                "its documents repeat in training"
                if set(found) == {"train"}
                else "a split evaluates on text the model trains on"
                if "train" in found
                else "validation and test measure the same text",
            )


@register_dataset("text", kind="lm", check=check_text, check_inputs=check_text_inputs)
def load_text(
    files: str | Sequence[str] = (),
    val_files: str | Sequence[str] | None = None,
    test_files: str | Sequence[str] | None = None,
    sample_by: str = "paragraph",
) -> Corpus:
    """Documents from local text files; val/test missing files are carved from train
    (``sample_by`` was checked by ``check_text``, which load_corpus runs first)."""
    train = resolve_files(files, "data.files")
    if not train:
        raise PosexpError(NO_FILES)
    given = {
        "val": resolve_files(val_files, "data.val_files"),
        "test": resolve_files(test_files, "data.test_files"),
    }
    say_overlaps({"train": train, **given})
    train_docs = read_documents(train, sample_by)
    need = tuple(s for s in ("val", "test") if not given[s])
    splits = (
        carve_tail(train_docs, "data.files", lambda: split_hint(train, sample_by, need), need=need)
        if need
        else {"train": train_docs}
    )
    for split, paths in given.items():
        if paths:
            splits[split] = read_documents(paths, sample_by)
    for split, docs in splits.items():
        if not docs:
            raise PosexpError(
                f"the {split} files of data=text contain no text; give non-empty files"
            )
    return Corpus(splits=splits, kind="lm")
