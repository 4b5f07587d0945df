"""Streaming tokenization into shards: resume after a kill, document starts, budgets, workers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from posexp.data import ByteTokenizer, Corpus, load_corpus, tokenize_splits
from posexp.data import shards as shards_module
from posexp.errors import PosexpError


def corpus_file(tmp_path: Path, n: int = 300) -> Path:
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(f"doc {i} " + "é" * (i % 7) + "x" * (i % 13) for i in range(n)))
    return path


def expected(docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and starts worked out independently: UTF-8 bytes, 258 (eos) after each document."""
    tokens: list[int] = []
    starts: list[int] = []
    for doc in docs:
        starts.append(len(tokens))
        tokens += [*doc.encode("utf-8"), 258]
    return np.array(tokens), np.array(starts)


def test_starts_mark_each_document_and_shards_join_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(shards_module, "SHARD_BYTES", 500)  # many shards
    corpus = load_corpus("text", files=[str(corpus_file(tmp_path))])
    got = tokenize_splits(corpus, ByteTokenizer(), tmp_path / "cache", key="t")
    for split in ("train", "val", "test"):
        docs = list(corpus.splits[split])
        tokens, starts = expected(docs)
        assert np.array_equal(got[split], tokens)
        assert np.array_equal(got.starts[split], starts)
        i = len(docs) // 2  # document i is tokens[starts[i]:starts[i+1]], its eos last
        doc = got[split][got.starts[split][i] : got.starts[split][i + 1]]
        assert bytes(doc[:-1].astype(np.uint8)).decode() == docs[i] and doc[-1] == 258
    assert not list((tmp_path / "cache").glob("*.parts"))  # shards removed once joined


def test_a_killed_tokenization_resumes_keeping_finished_shards(tmp_path, monkeypatch):
    monkeypatch.setattr(shards_module, "SHARD_BYTES", 400)
    corpus = load_corpus("text", files=[str(corpus_file(tmp_path))], workers=1)
    real = ByteTokenizer.encode_documents
    calls = {"n": 0}

    def dies_at_the_fifth(self, docs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt  # as a kill between shards
        return real(self, docs)

    monkeypatch.setattr(ByteTokenizer, "encode_documents", dies_at_the_fifth)
    with pytest.raises(KeyboardInterrupt):
        tokenize_splits(corpus, ByteTokenizer(), tmp_path / "cache", key="t")
    (parts,) = (tmp_path / "cache").glob("*.train.parts")
    assert sorted(p.name for p in parts.iterdir()) == [f"shard-{i:06d}.npz" for i in range(4)]
    assert not list((tmp_path / "cache").glob("*.train.npy"))  # nothing half-used
    encoded: list[int] = []

    def counting(self, docs):
        encoded.append(len(docs))
        return real(self, docs)

    monkeypatch.setattr(ByteTokenizer, "encode_documents", counting)
    got = tokenize_splits(corpus, ByteTokenizer(), tmp_path / "cache", key="t")
    n_shards = sum(1 for _ in shards_module.batches(corpus.splits["train"], 400))
    # train: all but the 4 kept shards encoded; val and test: one shard each
    assert len(encoded) == n_shards - 4 + 2
    assert np.array_equal(got["train"], expected(list(corpus.splits["train"]))[0])


def test_a_damaged_shard_is_encoded_again(tmp_path, monkeypatch):
    monkeypatch.setattr(shards_module, "SHARD_BYTES", 400)
    corpus = load_corpus("text", files=[str(corpus_file(tmp_path))])
    parts = tmp_path / "parts"
    docs = corpus.splits["train"]
    shards_module.encode_shards(docs, ByteTokenizer(), parts, None, 1, "t")
    first = shards_module.shard_path(parts, 0)
    first.write_bytes(first.read_bytes()[:50])
    assert shards_module.read_shard(first) is None
    counts = shards_module.encode_shards(docs, ByteTokenizer(), parts, None, 1, "t")
    assert shards_module.read_shard(first) is not None and sum(counts) == len(
        expected(list(docs))[0]
    )


def test_budget_is_the_first_n_tokens_and_too_large_a_budget_says_how_many(tmp_path, monkeypatch):
    monkeypatch.setattr(shards_module, "SHARD_BYTES", 300)
    path = corpus_file(tmp_path)
    full = tokenize_splits(load_corpus("text", files=[str(path)]), ByteTokenizer(), tmp_path, "a")
    some = load_corpus("text", files=[str(path)], max_tokens=1234)
    cut = tokenize_splits(some, ByteTokenizer(), tmp_path, key="a")
    assert np.array_equal(cut["train"], full["train"][:1234])
    assert np.array_equal(cut.starts["train"], full.starts["train"][full.starts["train"] < 1234])
    assert np.array_equal(cut["val"], full["val"])  # an integer budgets train only
    per_split = load_corpus("text", files=[str(path)], max_tokens={"val": 10})
    assert len(tokenize_splits(per_split, ByteTokenizer(), tmp_path, key="a")["val"]) == 10
    n = len(full["train"])
    with pytest.raises(PosexpError) as e:
        tokenize_splits(
            load_corpus("text", files=[str(path)], max_tokens=n + 1), ByteTokenizer(), tmp_path, "a"
        )
    assert str(e.value) == (
        f"data.max_tokens asks for {n + 1:,} train tokens, but the train split has only {n:,} "
        f"(with this tokenizer); allowed: up to {n}, or null for all"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, r"data.max_tokens must be a positive integer or null, got 0"),
        ({"dev": 5}, r"unknown setting data.max_tokens.dev; allowed: train, val, test"),
        (1.5, r"data.max_tokens must be a positive integer or null, got 1.5"),
    ],
)
def test_bad_budgets_are_one_line(tmp_path, value, message):
    with pytest.raises(PosexpError, match=message):
        load_corpus("text", files=[str(corpus_file(tmp_path))], max_tokens=value)


def test_two_workers_write_what_one_does(tmp_path, monkeypatch):
    monkeypatch.setattr(shards_module, "SHARD_BYTES", 700)
    docs = [f"document {i} " * (1 + i % 5) for i in range(400)]
    corpus = Corpus(splits={"train": docs[:300], "val": docs[300:350], "test": docs[350:]})
    one = tokenize_splits(corpus, ByteTokenizer(), tmp_path / "one", key="k")
    corpus.params = {"workers": 2}
    two = tokenize_splits(corpus, ByteTokenizer(), tmp_path / "two", key="k")
    for split in one:
        assert np.array_equal(one[split], two[split])
        assert np.array_equal(one.starts[split], two.starts[split])


@pytest.mark.parametrize(
    "damage",
    [
        lambda a: a[::-1].copy(),  # decreasing
        lambda a: a + 1,  # not from 0
        lambda a: np.append(a, 10**9),  # past the tokens
    ],
)
def test_damaged_document_starts_are_set_aside_and_made_again(tmp_path, damage):
    corpus = load_corpus("text", files=[str(corpus_file(tmp_path))], workers=1)
    first = tokenize_splits(corpus, ByteTokenizer(), tmp_path / "c", key="k")
    want = np.array(first["train"]), np.array(first.starts["train"])  # copies: the files change
    del first
    (path,) = (tmp_path / "c").glob("*.train.starts.npy")
    np.save(path, damage(np.load(path)))
    got = tokenize_splits(corpus, ByteTokenizer(), tmp_path / "c", key="k")
    assert np.array_equal(got["train"], want[0]) and np.array_equal(got.starts["train"], want[1])
    assert path.with_name(path.name + ".bak").exists() or list(path.parent.glob("*.bak"))
