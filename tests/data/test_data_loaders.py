"""Registry, local text files, and the hub loader (offline behaviour, local folders)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from posexp.data import Corpus, dataset_names, load_corpus
from posexp.data import hub as hub_module
from posexp.errors import PosexpError


def read_all(corpus: Corpus) -> Corpus:
    """Every document of every split read: where a streamed corpus meets its files' faults."""
    for docs in corpus.splits.values():
        list(docs)
    return corpus


def write_paragraphs(path: Path, n: int, tag: str = "p") -> Path:
    path.write_text("\n\n".join(f"{tag} {i} line a\n{tag} {i} line b" for i in range(n)) + "\n")
    return path


def test_registry_lists_datasets_and_rejects_unknown() -> None:
    assert dataset_names() == [
        "bible_books",
        "hub",
        "kjv",
        "pystdlib",
        "synthetic",
        "text",
        "wyc2kjv",
        "wyc2kjv_text",
    ]
    with pytest.raises(PosexpError) as e:
        load_corpus("wikitext")
    allowed = "bible_books, hub, kjv, pystdlib, synthetic, text, wyc2kjv, wyc2kjv_text"
    assert str(e.value) == f"unknown data 'wikitext'; allowed: {allowed}"
    with pytest.raises(PosexpError, match="unknown parameter 'fils' for data 'text'"):
        load_corpus("text", fils=["a.txt"])


def test_text_carves_val_and_test_from_train_tail(tmp_path: Path) -> None:
    f = write_paragraphs(tmp_path / "a.txt", 40)
    c = load_corpus("text", files=[str(f)])
    assert [len(c.splits[s]) for s in ("train", "val", "test")] == [36, 2, 2]
    assert c.splits["train"][0] == "p 0 line a\np 0 line b"
    assert c.splits["test"][-1] == "p 39 line a\np 39 line b"
    assert load_corpus("text", files=[str(f)]).splits == c.splits  # deterministic
    assert c.params == {"files": [str(f)]} and c.source == "text"


def test_text_uses_given_val_test_files_and_sample_by(tmp_path: Path) -> None:
    tr = write_paragraphs(tmp_path / "tr.txt", 5, "t")
    va = write_paragraphs(tmp_path / "va.txt", 2, "v")
    te = write_paragraphs(tmp_path / "te.txt", 3, "x")
    c = load_corpus("text", files=[str(tr)], val_files=[str(va)], test_files=str(te))
    assert [len(c.splits[s]) for s in ("train", "val", "test")] == [5, 2, 3]
    lines = load_corpus(
        "text", files=[str(tr)], val_files=[str(va)], test_files=[str(te)], sample_by="line"
    )
    assert len(lines.splits["train"]) == 10
    only_val = load_corpus("text", files=[str(tr)], val_files=[str(va)], sample_by="line")
    assert [len(only_val.splits[s]) for s in ("train", "val", "test")] == [9, 4, 1]


def test_text_errors_are_one_line_and_name_the_value(tmp_path: Path) -> None:
    with pytest.raises(PosexpError) as e:
        load_corpus("text", files=["x.txt"])
    assert str(e.value) == "data file not found: 'x.txt' (data.files must list existing text files)"
    with pytest.raises(PosexpError, match="data.files is empty"):
        load_corpus("text", files=[])
    one = write_paragraphs(tmp_path / "one.txt", 1)
    # Two lines in all: no sample_by gives the 3 documents needed, so none is advised.
    with pytest.raises(
        PosexpError,
        match=r"only 1 document, too few .* \(at least 3\); give data.val_files and "
        r"data.test_files, or more text: at least 3 files \(",
    ):
        read_all(load_corpus("text", files=[str(one)], sample_by="document"))
    # Already by line: a finer sample_by is no advice.
    with pytest.raises(
        PosexpError,
        match=r"data.test_files, or more text: at least 3 lines \(each of val/test gets the last "
        r"5%, at least one, and needs more tokens than train.seq_len\)$",
    ):
        read_all(load_corpus("text", files=[str(one)], sample_by="line"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        PosexpError, match=r"^data file '.*' is a folder with no data files \(data.files must"
    ):
        load_corpus("text", files=[str(tmp_path / "empty")])
    # A folder with files reads them, sorted.
    assert (
        read_all(
            load_corpus(
                "text",
                files=[str(tmp_path)],
                sample_by="line",
                val_files=[str(one)],
                test_files=[str(one)],
            )
        ).splits["train"][0]
        == "p 0 line a"
    )
    with pytest.raises(PosexpError, match=r"^data file '/dev/null' is not a regular file"):
        load_corpus("text", files=["/dev/null"])
    with pytest.raises(PosexpError, match="sample_by 'lines'; allowed: document, line, paragraph"):
        load_corpus("text", files=[str(one)], sample_by="lines")


def test_a_finer_sample_by_is_advised_only_where_it_gives_enough_documents(tmp_path):
    # Was "or a finer data.sample_by (line)" for a one-line file too, where it cannot help.
    one_line = tmp_path / "one.txt"
    one_line.write_text("hello world\n")
    with pytest.raises(PosexpError) as e:
        read_all(load_corpus("text", files=[str(one_line)]))
    assert str(e.value).endswith(
        "give data.val_files and data.test_files, or more text: at least 3 blank-line "
        "separated paragraphs (each of val/test gets the last 5%, at least one, and needs more "
        "tokens than train.seq_len)"
    )
    assert "sample_by" not in str(e.value)
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line {i}\n" for i in range(40)))
    with pytest.raises(PosexpError, match=r"data.test_files, or data.sample_by=line \(40 docu"):
        read_all(load_corpus("text", files=[str(lines)]))
    # Only val carved: two documents are enough, and the advice names the one split asked for.
    two = tmp_path / "two.txt"
    two.write_text("a b\nc d\n")
    with pytest.raises(PosexpError, match=r"; give data.val_files, or data.sample_by=line \(2 "):
        read_all(load_corpus("text", files=[str(two)], test_files=[str(lines)]))


def assert_fast_one_line_offline_error(seconds: float) -> None:
    # A bound on hanging (retries against an unreachable hub took 23 s), not a speed test.
    t = time.perf_counter()
    with pytest.raises(PosexpError) as e:
        load_corpus("hub", name="wikitext", config="wikitext-103-raw-v1")
    elapsed = time.perf_counter() - t
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("cannot reach the Hugging Face hub to load dataset 'wikitext' (")
    assert msg.endswith("; use data=text data.files=[...] for local files")
    assert elapsed < seconds, elapsed


def test_hub_offline_env_fails_fast_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets  # noqa: F401  (imported first: the env var must work after import too)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert_fast_one_line_offline_error(10.0)


def test_hub_unreachable_without_env_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    # Simulate no network without depending on this machine's: the probe says unreachable.
    monkeypatch.setattr(hub_module, "hub_reachable", lambda timeout=3.0: False)
    assert_fast_one_line_offline_error(10.0)


def test_hub_probe_is_bounded_by_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    # A local server that accepts connections but never answers: without the timeout the probe
    # (and the hub client) would hang.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        t = time.perf_counter()
        assert hub_module.hub_reachable(timeout=0.5) is False
        assert time.perf_counter() - t < 10  # the probe gave up instead of hanging


def test_hub_local_folder_maps_and_carves_splits(tmp_path: Path) -> None:
    (tmp_path / "train.txt").write_text("".join(f"row {i}\n" for i in range(60)) + "\n   \n")
    (tmp_path / "validation.txt").write_text("v1\nv2\n")
    c = load_corpus("hub", name=str(tmp_path))
    assert isinstance(c, Corpus)
    assert [len(c.splits[s]) for s in ("train", "val", "test")] == [57, 2, 3]
    assert c.splits["val"] == ["v1", "v2"] and c.splits["test"][-1] == "row 59"
    with pytest.raises(
        PosexpError, match="column 'content' is not in split 'train'.*allowed: text"
    ):
        load_corpus("hub", name=str(tmp_path), column="content")
    with pytest.raises(PosexpError, match="maps val to 'dev'.*allowed: train, validation"):
        load_corpus("hub", name=str(tmp_path), split_map={"val": "dev"})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", r"^data file '.*bad.txt' \(data.files\) is empty$"),
        (
            b"text\x00\x01\x02",
            r"^data file '.*bad.txt' \(data.files\) looks binary: it has a NUL byte at offset 4;",
        ),
        (
            "caf\u00e9 na\u00efve".encode("latin-1"),
            r"^data file '.*bad.txt' \(data.files\) is not UTF-8: byte 0xe9 "
            r"at offset 3; convert it first",
        ),
        (
            "caf\u00e9".encode()[:-1],
            r"^data file '.*bad.txt' \(data.files\) is not UTF-8: it ends inside",
        ),
    ],
)
def test_unreadable_text_files_are_named_with_the_reason(
    tmp_path: Path, content: bytes, message: str
) -> None:
    (tmp_path / "bad.txt").write_bytes(content)
    with pytest.raises(PosexpError, match=message):
        read_all(load_corpus("text", files=[str(tmp_path / "bad.txt")]))


def test_a_file_read_twice_is_said(tmp_path, caplog):
    from posexp.data.text import say_overlaps

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    with caplog.at_level("WARNING", logger="posexp"):
        say_overlaps({"train": [str(a), str(b)], "val": [], "test": []})  # apart: nothing said
        assert not caplog.records
        say_overlaps(
            {"train": [str(a), str(a)], "val": [str(b)], "test": [str(tmp_path / "." / "b.txt")]}
        )
        say_overlaps({"train": [str(a)], "val": [str(a)]})
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"data file {a} is read 2 times (train, train): its documents repeat in training",
        f"data file {b} is read 2 times (val, test): validation and test measure the same text",
        f"data file {a} is read 2 times (train, val): a split evaluates on text the model trains on",
    ]
