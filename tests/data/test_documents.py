"""Documents streamed from files: paragraphs across chunks, tables, streaming folders, bad data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posexp.data import ByteTokenizer, check_dataset, load_corpus, tokenize_splits
from posexp.data import documents as documents_module
from posexp.data.documents import TextDocuments
from posexp.errors import PosexpError


def test_paragraphs_split_by_a_chunk_boundary_are_read_whole(tmp_path, monkeypatch):
    text = "".join(f"para {i}\nline two é{'x' * (i % 9)}\n\n\n" for i in range(200))
    (tmp_path / "a.txt").write_text(text)
    want = [p.strip() for p in text.split("\n\n") if p.strip()]
    monkeypatch.setattr(documents_module, "CHUNK_BYTES", 37)  # boundaries everywhere
    assert list(TextDocuments([str(tmp_path / "a.txt")], "paragraph")) == want
    lines = [line for line in text.splitlines() if line.strip()]
    assert list(TextDocuments([str(tmp_path / "a.txt")], "line")) == lines
    assert list(TextDocuments([str(tmp_path / "a.txt")], "document")) == [text.strip()]


def write_parquet_folder(folder: Path, rows: int = 80, column: str = "text") -> list[str]:
    folder.mkdir()
    docs = [f"row {i} " + "word " * (i % 11) for i in range(rows)]
    half = rows // 2
    pq.write_table(pa.table({column: docs[:half], "n": list(range(half))}), folder / "a.parquet")
    pq.write_table(
        pa.table({column: docs[half:], "n": list(range(half, rows))}), folder / "b.parquet"
    )
    return [d.strip() for d in docs]


def test_a_parquet_folder_as_data_text(tmp_path):
    docs = write_parquet_folder(tmp_path / "pq")
    corpus = load_corpus("text", files=[str(tmp_path / "pq")])
    assert (
        list(corpus.splits["train"]) + list(corpus.splits["val"]) + list(corpus.splits["test"])
        == docs
    )
    assert len(corpus.splits["val"]) == len(corpus.splits["test"]) == 4  # 5% of 80 each


def test_streaming_from_a_local_parquet_folder(tmp_path):
    docs = write_parquet_folder(tmp_path / "pq")
    corpus = load_corpus("hub", name=str(tmp_path / "pq"), streaming=True, carve_docs=5)
    # Streaming carves from the start: val, then test, then train; disjoint, in order.
    assert list(corpus.splits["val"]) == docs[:5]
    assert list(corpus.splits["test"]) == docs[5:10]
    assert list(corpus.splits["train"]) == docs[10:]
    got = tokenize_splits(corpus, ByteTokenizer(), tmp_path / "cache", key="s")
    assert bytes(got["val"][: got.starts["val"][1] - 1].astype(np.uint8)).decode() == docs[0]
    assert len(got.starts["train"]) == len(docs) - 10


def test_json_lines_and_arrow_tables(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n\n{"text": "  "}\n')
    assert list(
        load_corpus(
            "text",
            files=[str(tmp_path / "a.jsonl")],
            val_files=[str(tmp_path / "a.jsonl")],
            test_files=[str(tmp_path / "a.jsonl")],
        ).splits["train"]
    ) == [
        "one",
        "two",
    ]
    table = pa.table({"body": ["x y", "z"]})
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    arrow = str(tmp_path / "t.arrow")
    corpus = load_corpus(
        "text", files=[arrow], val_files=[arrow], test_files=[arrow], column="body"
    )
    assert list(corpus.splits["test"]) == ["x y", "z"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("blank.txt", b"\n\n  \n\n", r"holds only blank lines; give files with text$"),
        ("empty.txt", b"", r"\(data\.(val_)?files\) is empty$"),
        ("bin.txt", b"ab\x00cd", r"looks binary: it has a NUL byte at offset 2;"),
        (
            "latin.txt",
            "caf\u00e9 na\u00efve".encode("latin-1"),
            r"is not UTF-8: byte 0xe9 at offset 3;",
        ),
    ],
)
def test_bad_files_are_refused_in_one_line_before_a_run(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    good = tmp_path / "good.txt"
    good.write_text("\n\n".join(f"p {i}" for i in range(40)))
    for params in (
        {"files": [str(tmp_path / name)]},
        {"files": [str(good)], "val_files": [str(tmp_path / name)]},
    ):
        with pytest.raises(PosexpError, match=message) as e:
            check_dataset("text", params, inputs=True)  # where the config is built
        assert "\n" not in str(e.value)


def test_a_table_without_the_column_is_one_line(tmp_path):
    write_parquet_folder(tmp_path / "pq", column="content")
    with pytest.raises(PosexpError) as e:
        check_dataset("text", {"files": [str(tmp_path / "pq")]}, inputs=True)
    assert str(e.value) == (
        f"data file '{tmp_path / 'pq' / 'a.parquet'}' (data.files) has no column 'text'; "
        "allowed (data.column): content, n"
    )
    (tmp_path / "a.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(PosexpError, match=r"line 1 has no column 'text'; allowed .*: body$"):
        check_dataset("text", {"files": [str(tmp_path / "a.jsonl")]}, inputs=True)
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(PosexpError, match=r"is not a readable parquet file: "):
        check_dataset("text", {"files": [str(tmp_path / "bad.parquet")]}, inputs=True)


def test_a_bad_byte_past_the_probe_is_one_line_when_streamed(tmp_path, monkeypatch):
    monkeypatch.setattr("posexp.data.text.EAGER_BYTES", 10)  # as if the corpus were large
    monkeypatch.setattr(documents_module, "CHUNK_BYTES", 64)
    path = tmp_path / "big.txt"
    path.write_bytes(("\n\n".join(f"p {i}" for i in range(100))).encode() + b"\n\n\xff\n")
    check_dataset("text", {"files": [str(path)]}, inputs=True)  # the start is fine
    corpus = load_corpus("text", files=[str(path)], workers=1)
    with pytest.raises(PosexpError, match=r"is not UTF-8: byte 0xff at offset \d+;"):
        tokenize_splits(corpus, ByteTokenizer(), tmp_path / "cache", key="k")
    assert not list((tmp_path / "cache").glob("*.npy"))  # no token file half-made


def test_reading_from_a_mark_gives_the_documents_from_there(tmp_path, monkeypatch):
    monkeypatch.setattr(documents_module, "CHUNK_BYTES", 29)  # marks mid-character too
    files = []
    for f in range(3):
        path = tmp_path / f"{f}.txt"
        path.write_text("".join(f"f{f} p{i} \u00e9\u65e5{'y' * (i % 5)}\n\n" for i in range(30)))
        files.append(str(path))
    for sample_by in ("paragraph", "line", "document"):
        docs = TextDocuments(files, sample_by)
        whole = list(docs)  # the first pass marks the chunks
        assert sample_by == "document" or len(docs._marks) > 10
        for start in (0, 1, 17, 29, 30, 31, 55, len(whole) - 1, len(whole)):
            assert list(docs.iter_from(start)) == whole[start:], (sample_by, start)
