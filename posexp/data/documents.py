"""A split's documents read on demand, in a fixed order, so no corpus is ever held whole in memory.

``Documents`` is a re-iterable sequence of strings: ``TextDocuments`` streams paragraphs (or lines,
or whole files) out of text files a few MB at a time; ``TableDocuments`` streams one column of
Parquet, JSON Lines or Arrow files; ``RowDocuments`` wraps any iterable of rows (a datasets
``Dataset`` or streaming ``IterableDataset``). ``Slice`` is a contiguous run of another's
documents: how val and test are carved off train without copying it.

Each has a ``fingerprint`` that keys the caches built from it. Local files are keyed by their
path, size and modification time rather than their content, so a cached run starts without
reading the corpus again; an edit to a file changes its time and with it the key.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
import os
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from posexp.errors import PosexpError

CHUNK_BYTES = 4 << 20  # text read (and split) at a time: memory stays flat in the file size
TABLE_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".arrow": "arrow"}


class Documents(Sequence[str]):
    """A split's documents, streamed in order; its length is counted by one pass, once."""

    _count: int | None = None

    @abstractmethod
    def __iter__(self) -> Iterator[str]:
        """Each non-blank document, stripped, in order."""

    @abstractmethod
    def fingerprint(self) -> str:
        """What the documents depend on, as a short string (keys the caches)."""

    def nbytes(self) -> int | None:
        """Bytes of source behind these documents (a progress bar's total), None if unknown."""
        return None

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self)
        return self._count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return list(self)[index]
        n = len(self) if index < 0 else 0
        for doc in itertools.islice(self, index + n, None):
            return doc
        raise IndexError(index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, Documents)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def file_stamp(path: str) -> list[Any]:
    """A file's identity for cache keys: real path, size and modification time (ns)."""
    st = os.stat(path)
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns]


def digest(*parts: Any) -> str:
    """Short hash of JSON-able ``parts``."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


class TextDocuments(Documents):
    """Documents of UTF-8 text files: files, blank-line separated paragraphs, or lines.

    Read ``CHUNK_BYTES`` at a time; a paragraph split by a chunk boundary is carried over whole.
    A NUL byte or bytes that are not UTF-8 stop the read with one line naming the file, the
    offset and the setting (``key``) that listed it.
    """

    def __init__(self, files: Sequence[str], sample_by: str, key: str = "data.files") -> None:
        self.files, self.sample_by, self.key = list(files), sample_by, key
        # Where reading may start again without reading what is before: (documents before it,
        # file, byte offset, decoder state, text carried over), one per chunk, recorded by the
        # first whole pass (the one that counts the documents), so a carved split's documents
        # are read from near their start rather than from the first file.
        self._marks: list[tuple[int, int, int, Any, str]] = []

    def fingerprint(self) -> str:
        return digest("text", self.sample_by, [file_stamp(f) for f in self.files])

    def nbytes(self) -> int:
        return sum(os.path.getsize(f) for f in self.files)

    def __iter__(self) -> Iterator[str]:
        return self.iter_from(0)

    def iter_from(self, start: int) -> Iterator[str]:
        """The documents from the ``start``-th on."""
        mark = max((m for m in self._marks if m[0] <= start), default=None, key=lambda m: m[0])
        n, file, offset, state, rest = mark or (0, 0, 0, None, "")
        skip = start - n
        for index in range(file, len(self.files)):
            for doc in self.read(index, offset, state, rest, n):
                if skip:
                    skip -= 1
                else:
                    yield doc
                n += 1
            offset, state, rest = 0, None, ""

    def read(
        self,
        index: int,
        offset: int = 0,
        state: Any = None,
        rest: str = "",
        before: int = 0,
    ) -> Iterator[str]:
        """The documents of file ``index``, from byte ``offset`` (decoder ``state``, ``rest``
        carried over, ``before`` documents before them), marking chunks not marked yet."""
        sep = "\n\n" if self.sample_by == "paragraph" else None
        whole: list[str] = []
        n = before
        chunks = read_text_chunks(self.files[index], self.key, offset, state)
        for text, at, decoder_state in chunks:
            if self.sample_by == "document":
                whole.append(text)
                continue
            pieces = (rest + text).split(sep) if sep else (rest + text).splitlines(keepends=True)
            rest = pieces.pop()  # may continue in the next chunk
            for piece in pieces:
                if doc := piece.strip():
                    yield doc
                    n += 1
            if not self._marks or (index, at) > self._marks[-1][1:3]:
                self._marks.append((n, index, at, decoder_state, rest))
        if doc := ("".join(whole) if whole else rest).strip():
            yield doc


def read_text_chunks(
    path: str, key: str, offset: int = 0, state: Any = None
) -> Iterator[tuple[str, int, Any]]:
    """Decoded chunks of a UTF-8 file from byte ``offset`` (the decoder in ``state``), each with
    the offset after it and the decoder's state there; a NUL or a byte that is not UTF-8 is one
    PosexpError."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    if state is not None:
        decoder.setstate(state)
    with open(path, "rb") as f:
        f.seek(offset)
        while chunk := f.read(CHUNK_BYTES):
            nul = chunk.find(b"\0")
            if nul >= 0:
                raise PosexpError(
                    f"data file {path!r} ({key}) looks binary: it has a NUL byte at "
                    f"offset {offset + nul}; data=text reads UTF-8 text"
                )
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as e:
                raise PosexpError(
                    f"data file {path!r} ({key}) is not UTF-8: byte 0x{chunk[e.start]:02x} at "
                    f"offset {offset + e.start}; convert it first, e.g. iconv -f latin1 -t utf-8"
                ) from None
            offset += len(chunk)
            yield text, offset, decoder.getstate()
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise PosexpError(
                f"data file {path!r} ({key}) is not UTF-8: it ends inside a multi-byte character"
            ) from None


class TableDocuments(Documents):
    """One text column of Parquet, JSON Lines or Arrow files, a batch of rows at a time."""

    def __init__(self, files: Sequence[str], column: str, key: str = "data.files") -> None:
        self.files, self.column, self.key = list(files), column, key

    def fingerprint(self) -> str:
        return digest("table", self.column, [file_stamp(f) for f in self.files])

    def nbytes(self) -> int:
        return sum(os.path.getsize(f) for f in self.files)

    def __iter__(self) -> Iterator[str]:
        for path in self.files:
            for values in table_batches(path, self.column, self.key):
                for value in values:
                    if isinstance(value, str) and (doc := value.strip()):
                        yield doc


def table_batches(path: str, column: str, key: str) -> Iterator[list[Any]]:
    """The values of ``column`` in a Parquet/JSON Lines/Arrow file, in batches of rows."""
    kind = TABLE_SUFFIXES[Path(path).suffix.lower()]
    if kind == "json":
        yield from json_batches(path, column, key)
        return
    import pyarrow as pa

    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(path)
            require_column(path, key, column, pf.schema_arrow.names)
            batches: Iterable[Any] = pf.iter_batches(batch_size=4096, columns=[column])
        else:
            source = pa.memory_map(path)
            try:
                reader: Any = pa.ipc.open_stream(source)  # what datasets writes
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(source)
                reader = (reader.get_batch(i) for i in range(reader.num_record_batches))
            else:
                require_column(path, key, column, reader.schema.names)
            batches = reader
        for batch in batches:
            require_column(path, key, column, batch.schema.names)
            yield batch.column(column).to_pylist()
    except (pa.ArrowException, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PosexpError(
            f"data file {path!r} ({key}) is not a readable {kind} file: {first}"
        ) from None


def json_batches(path: str, column: str, key: str, rows: int = 4096) -> Iterator[list[Any]]:
    """``column`` of each JSON object of a JSON Lines file, in batches."""
    batch: list[Any] = []
    for n, line in enumerate(read_lines(path, key), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise PosexpError(
                f"data file {path!r} ({key}) line {n} is not JSON ({e.msg}); "
                "JSON files are read as JSON Lines, one object a line"
            ) from None
        if not isinstance(row, dict) or column not in row:
            have = sorted(row) if isinstance(row, dict) else []
            raise PosexpError(
                f"data file {path!r} ({key}) line {n} has no column {column!r}; "
                f"allowed (data.column): {', '.join(have) or 'none: it is not an object'}"
            )
        batch.append(row[column])
        if len(batch) >= rows:
            yield batch
            batch = []
    if batch:
        yield batch


def read_lines(path: str, key: str) -> Iterator[str]:
    """Lines of a UTF-8 file, streamed (the checks of ``read_text_chunks``)."""
    rest = ""
    for text, _, _ in read_text_chunks(path, key):
        lines = (rest + text).split("\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def require_column(path: str, key: str, column: str, names: Sequence[str]) -> None:
    """Refuse a table without ``column``, naming the columns it has."""
    if column not in names:
        raise PosexpError(
            f"data file {path!r} ({key}) has no column {column!r}; allowed (data.column): "
            f"{', '.join(names) or 'none'}"
        )


class RowDocuments(Documents):
    """``column`` of the rows of a datasets ``Dataset`` or ``IterableDataset`` (streaming)."""

    def __init__(self, rows: Any, column: str, key: str) -> None:
        self.rows, self.column, self.key = rows, column, key

    def fingerprint(self) -> str:
        return digest("rows", self.key, self.column, getattr(self.rows, "_fingerprint", None))

    def __iter__(self) -> Iterator[str]:
        if hasattr(self.rows, "iter"):
            batches = self.rows.select_columns([self.column]).iter(batch_size=1024)
            for batch in batches:
                for value in batch[self.column]:
                    if isinstance(value, str) and (doc := value.strip()):
                        yield doc
            return
        for row in self.rows:
            value = row.get(self.column)
            if isinstance(value, str) and (doc := value.strip()):
                yield doc


class Slice(Documents):
    """Documents ``start`` up to ``stop`` (None: the end) of ``base``."""

    def __init__(self, base: Documents, start: int, stop: int | None) -> None:
        self.base, self.start, self.stop = base, start, stop
        if stop is not None:
            self._count = stop - start

    def fingerprint(self) -> str:
        return digest("slice", self.base.fingerprint(), self.start, self.stop)

    def nbytes(self) -> int | None:
        whole = self.base.nbytes()
        if whole is None or self._count is None or not len(self.base):
            return whole
        return whole * self._count // len(self.base)

    def __iter__(self) -> Iterator[str]:
        stop = None if self.stop is None else self.stop - self.start
        return itertools.islice(iter_from(self.base, self.start), stop)


def iter_from(docs: Documents, start: int) -> Iterator[str]:
    """``docs`` from the ``start``-th document on (by a mark where the documents keep them)."""
    if isinstance(docs, TextDocuments):
        return docs.iter_from(start)
    return itertools.islice(iter(docs), start, None)


def fingerprint_of(docs: Sequence[str]) -> str:
    """A split's fingerprint: a stream's own, or the content hash of an in-memory list."""
    if isinstance(docs, Documents):
        return docs.fingerprint()
    h = hashlib.blake2b(digest_size=16)
    for text in docs:
        b = text.encode("utf-8")
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def batches(docs: Iterable[str], max_bytes: int) -> Iterator[list[str]]:
    """``docs`` in consecutive groups of about ``max_bytes`` of text (at least one document)."""
    group: list[str] = []
    size = 0
    for doc in docs:
        group.append(doc)
        size += len(doc)
        if size >= max_bytes:
            yield group
            group, size = [], 0
    if group:
        yield group


class TailSplit(Documents):
    """One split of ``base`` carved by ``posexp.data.splits.carve_tail`` (the ``need``ed splits off
    its end, 5% each): the bounds are counted when first read, not when the corpus loads, and the
    fingerprint needs no count."""

    def __init__(
        self, base: Documents, split: str, need: tuple[str, ...], what: str, hint: Any
    ) -> None:
        self.base, self.split, self.need, self.what, self.hint = base, split, need, what, hint
        self._bounds: tuple[int, int] | None = None

    def bounds(self) -> tuple[int, int]:
        """(start, stop) of this split among the base's documents."""
        if self._bounds is None:
            from posexp.data.splits import carve_bounds

            found = carve_bounds(len(self.base), self.what, self.hint, need=self.need)
            self._bounds = found[self.split]
        return self._bounds

    def fingerprint(self) -> str:
        return digest("tail", self.base.fingerprint(), self.split, self.need)

    def nbytes(self) -> int | None:
        whole = self.base.nbytes()
        if whole is None:
            return None
        start, stop = self.bounds()
        return whole * (stop - start) // max(len(self.base), 1)

    def __len__(self) -> int:
        start, stop = self.bounds()
        return stop - start

    def __iter__(self) -> Iterator[str]:
        start, stop = self.bounds()
        return itertools.islice(iter_from(self.base, start), stop - start)
