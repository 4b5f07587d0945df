"""Local text (or Parquet / JSON Lines / Arrow) files as a language-model corpus, streamed.

``files`` are the train files; ``val_files`` / ``test_files`` are optional. A split given no files
is carved off the end of the train documents (5% each, at least one document; see
``posexp.data.splits.carve_tail``), so the split is fixed by the file contents and order.
A document is a whole file (``sample_by="document"``), a blank-line separated paragraph
(``"paragraph"``, the default) or a line (``"line"``); whitespace-only documents are dropped.
Paths may be glob patterns (sorted, for a stable order) or folders (their files, sorted). Files
ending .parquet, .jsonl/.json (JSON Lines) or .arrow are tables: ``column`` of each row is a
document. Nothing is read when the corpus loads: the documents stream from the files when the
tokenizer is trained and the token cache is written (``posexp.data.documents``), so a cached run
starts without reading them. The input check before a run reads a small corpus whole, and the
start of a large one, so most bad files are refused before the run starts.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posexp.data.documents import (
    TABLE_SUFFIXES,
    Documents,
    TableDocuments,
    TailSplit,
    TextDocuments,
    read_text_chunks,
    table_batches,
)
from posexp.data.registry import Corpus, register_dataset
from posexp.errors import PosexpError, choose

SAMPLE_BY = ("document", "paragraph", "line")
log = logging.getLogger("posexp")

NO_FILES = "data.files is empty; set data.files=[path.txt,...] to existing text files"
UNITS = {"document": "files", "paragraph": "blank-line separated paragraphs", "line": "lines"}
# Below this many bytes in all, the input check reads the files whole, so every bad byte is
# refused before a run starts; above, it reads the start of each (the rest as it streams).
EAGER_BYTES = 64 << 20


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
        elif Path(f).is_dir() and (inside := folder_files(f)):
            out.extend(inside)
        elif Path(f).exists():
            what = "a folder with no data files" if Path(f).is_dir() else "not a regular file"
            raise PosexpError(f"data file {f!r} is {what} ({key} must list text files)")
        else:
            raise PosexpError(f"data file not found: {f!r} ({key} must list existing text files)")
    for f in out if read else ():
        probe_file(f, key)
    return out


def folder_files(folder: str) -> list[str]:
    """The files directly in ``folder``, sorted, skipping hidden ones (``.lock``, ``.cache``)."""
    return sorted(
        str(p) for p in Path(folder).iterdir() if p.is_file() and not p.name.startswith(".")
    )


def documents_of(files: list[str], sample_by: str, column: str, key: str) -> Documents:
    """The documents of ``files``: text files by ``sample_by``; tables (all of one format) by
    ``column``."""
    kinds = {TABLE_SUFFIXES.get(Path(f).suffix.lower(), "text") for f in files}
    if len(kinds) > 1:
        raise PosexpError(
            f"{key} mixes {' and '.join(sorted(kinds))} files; list files of one format "
            f"(text, or tables: {', '.join(sorted(set(TABLE_SUFFIXES)))})"
        )
    if kinds == {"text"}:
        return TextDocuments(files, sample_by, key)
    return TableDocuments(files, column, key)


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
    """The files data=text names exist and hold text (each job of a sweep checked before any
    starts): a small corpus is read whole; a large one, the start of each file (the rest is
    checked as it streams)."""
    train = resolve_files(params.get("files", ()), "data.files", read=False)
    if not train:
        raise PosexpError(NO_FILES)
    given = {
        split: resolve_files(params.get(f"{split}_files"), f"data.{split}_files", read=False)
        for split in ("val", "test")
    }
    column = params.get("column", "text")
    listed = (("data.files", train), *((f"data.{s}_files", f) for s, f in given.items()))
    small = sum(os.path.getsize(f) for _, fs in listed for f in fs) <= EAGER_BYTES
    for key, files in listed:
        for f in files:
            probe_file(f, key, column)
            if small and Path(f).suffix.lower() not in TABLE_SUFFIXES:
                check_text_file(f, key)  # a bad byte anywhere is said before the run starts


def probe_file(path: str, key: str, column: str = "text") -> None:
    """Refuse, naming the file, one that is empty or holds only whitespace, or whose start is
    binary (NUL bytes) or not UTF-8; a table, one without ``column``. Reads the first chunk, and
    further only while it finds no text."""
    if os.path.getsize(path) == 0:
        raise PosexpError(f"data file {path!r} ({key}) is empty")
    if Path(path).suffix.lower() in TABLE_SUFFIXES:
        for _ in table_batches(path, column, key):
            break  # the schema (and the first rows) are read: the column is there
        return
    for text, _, _ in read_text_chunks(path, key):
        if text.strip():
            return
    raise PosexpError(f"data file {path!r} ({key}) holds only blank lines; give files with text")


def check_text_file(path: str, key: str) -> None:
    """Refuse, naming the file, one that is empty, binary (NUL bytes) or not UTF-8 text: the
    whole file is read."""
    if os.path.getsize(path) == 0:
        raise PosexpError(f"data file {path!r} ({key}) is empty")
    for _ in read_text_chunks(path, key):
        pass


def read_documents(files: list[str], sample_by: str) -> list[str]:
    """Documents of text `files`, in file order (read whole: for small corpora and advice)."""
    return list(TextDocuments(files, sample_by))


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
    column: str = "text",
) -> Corpus:
    """Documents streamed from local files; val/test missing files are carved from the end of
    train when first read (``sample_by`` was checked by ``check_text``, which load_corpus runs
    first)."""
    train = resolve_files(files, "data.files", read=False)
    if not train:
        raise PosexpError(NO_FILES)
    given = {
        "val": resolve_files(val_files, "data.val_files", read=False),
        "test": resolve_files(test_files, "data.test_files", read=False),
    }
    for split, paths in {"train": train, **given}.items():
        for path in paths:
            probe_file(path, "data.files" if split == "train" else f"data.{split}_files", column)
    say_overlaps({"train": train, **given})
    train_docs = documents_of(train, sample_by, column, "data.files")
    need = tuple(s for s in ("val", "test") if not given[s])
    splits: dict[str, Sequence[str]] = {}
    for split in ("train", *need) if need else ():
        splits[split] = TailSplit(
            train_docs, split, need, "data.files", lambda: split_hint(train, sample_by, need)
        )
    if not need:
        splits["train"] = train_docs
    for split, paths in given.items():
        if paths:
            splits[split] = documents_of(paths, sample_by, column, f"data.{split}_files")
    return Corpus(splits=splits, kind="lm")
