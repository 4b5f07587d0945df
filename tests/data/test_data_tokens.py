"""Tokenizers, the token cache, LM batches and eval windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from posexp.data import (
    ByteTokenizer,
    Corpus,
    LMBatches,
    build_tokenizer,
    eval_windows,
    tokenize_splits,
    tokenizer_names,
)
from posexp.data import tokenizers as tok_module
from posexp.errors import PosexpError


def small_corpus(extra: str = "") -> Corpus:
    words = "the lord said unto moses and aaron go forth into the land of egypt ĉu ĝi 日本".split()
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(words, size=40)) + extra for _ in range(60)]
    return Corpus(splits={"train": docs[:50], "val": docs[50:55], "test": docs[55:]})


def test_byte_round_trip_non_ascii_and_specials() -> None:
    tok = ByteTokenizer()
    text = "Héllo, wörld — 日本語 🙂"
    ids = tok.encode(text)
    assert len(ids) == len(text.encode("utf-8")) and max(ids) < 256
    assert tok.decode(ids) == text
    assert tok.decode([tok.bos_id, *ids, tok.sep_id, tok.eos_id, tok.pad_id]) == text
    assert tok.decode([0xE6, 0x97]) == "\ufffd"  # a cut multi-byte char does not raise
    assert tok.vocab_size == 260 and len({tok.pad_id, tok.bos_id, tok.eos_id, tok.sep_id}) == 4


def test_byte_stream_matches_slow_path() -> None:
    tok, docs = ByteTokenizer(), ["ab", "", "日本"]
    fast = tok.encode_stream(docs)
    slow = [i for d in docs for i in [*tok.encode(d), tok.eos_id]]
    assert fast.dtype == np.uint16 and fast.tolist() == slow


def test_unknown_tokenizer_and_bad_params() -> None:
    assert tokenizer_names() == ["bpe", "byte"]
    with pytest.raises(PosexpError, match="unknown tokenizer 'sentencepiece'; allowed: bpe, byte"):
        build_tokenizer("sentencepiece", small_corpus(), Path("."))
    with pytest.raises(PosexpError, match="unknown parameter 'vocab_size' for tokenizer 'byte'"):
        build_tokenizer("byte", small_corpus(), Path("."), vocab_size=300)
    with pytest.raises(
        PosexpError, match=r"^tokenizer.vocab_size must be an integer in \[260, 1048576\], got 100$"
    ):
        build_tokenizer("bpe", small_corpus(), Path("."), vocab_size=100)


def test_bpe_trains_on_train_only_caches_and_round_trips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = small_corpus()
    seen: list[list[str]] = []
    real_train = tok_module.train_bpe

    def spy(texts, vocab_size, path, max_bytes):  # record what it trains on
        seen.append(list(texts))
        real_train(seen[-1], vocab_size, path, max_bytes)

    monkeypatch.setattr(tok_module, "train_bpe", spy)
    tok = build_tokenizer("bpe", corpus, tmp_path, vocab_size=300)
    assert seen == [corpus.splits["train"]]
    assert tok.vocab_size == 300 and (tok.pad_id, tok.bos_id, tok.eos_id, tok.sep_id) == (
        0,
        1,
        2,
        3,
    )
    text = "  the lord said, ĉu 日本 🙂\nnew line"
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode([tok.bos_id, *tok.encode("go forth"), tok.eos_id]) == "go forth"
    assert len(tok.encode("the lord said unto moses")) < len(b"the lord said unto moses")

    def no_training(*args):
        raise AssertionError("retrained although cached")

    monkeypatch.setattr(tok_module, "train_bpe", no_training)
    again = build_tokenizer("bpe", corpus, tmp_path, vocab_size=300)
    assert again.fingerprint == tok.fingerprint
    assert again.encode(text) == tok.encode(text)
    with pytest.raises(AssertionError, match="retrained"):  # another vocab size is another key
        build_tokenizer("bpe", corpus, tmp_path, vocab_size=310)
    with pytest.raises(AssertionError, match="retrained"):  # other data is another key
        build_tokenizer("bpe", small_corpus(extra=" x"), tmp_path, vocab_size=300)


def test_token_cache_written_once_memmapped_and_keyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus, tok = small_corpus(), ByteTokenizer()
    streams = tokenize_splits(corpus, tok, tmp_path, key="small/byte")
    assert set(streams) == {"train", "val", "test"}
    for split, arr in streams.items():
        assert isinstance(arr, np.memmap) and arr.dtype == np.uint16
        assert arr.tolist() == tok.encode_stream(corpus.splits[split]).tolist()
        assert (arr == tok.eos_id).sum() == len(corpus.splits[split])
    files = sorted(p.name for p in tmp_path.iterdir())
    # tokens and document starts per split; no shard folder or temp file left behind
    assert len(files) == 6 and not any(f.endswith((".tmp", ".parts")) for f in files)

    def fail(*args):
        raise AssertionError("re-tokenized although cached")

    monkeypatch.setattr(ByteTokenizer, "encode_documents", fail)
    monkeypatch.setattr(ByteTokenizer, "encode", fail)
    again = tokenize_splits(corpus, tok, tmp_path, key="small/byte")
    assert all(np.array_equal(again[s], streams[s]) for s in streams)
    with pytest.raises(AssertionError, match="re-tokenized"):  # changed data: new cache entry
        tokenize_splits(small_corpus(extra=" z"), tok, tmp_path, key="small/byte")
    # The key names the entry, the content keys it: other settings (data.workers) share it.
    assert np.array_equal(tokenize_splits(corpus, tok, tmp_path, key="v2")["val"], streams["val"])


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda b: b"", "No data left"),  # emptied
        (lambda b: b[: len(b) // 2], "mmap length"),  # truncated
        (lambda b: b[:-8] + b"\xff" * 8, "past the vocabulary"),  # ids overwritten
        (lambda b: b"not a numpy file at all", "pickled"),
    ],
)
def test_a_damaged_token_cache_is_set_aside_and_made_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage, problem
) -> None:
    corpus, tok = small_corpus(), ByteTokenizer()
    want = tokenize_splits(corpus, tok, tmp_path, key="small/byte")["train"].tolist()
    (path,) = tmp_path.glob("*.train.npy")
    assert not path.name.endswith(".starts.npy")
    bad = damage(path.read_bytes())
    path.write_bytes(bad)
    got = tokenize_splits(corpus, tok, tmp_path, key="small/byte")["train"]
    assert got.tolist() == want and path.with_name(path.name + ".bak").read_bytes() == bad
    (message,) = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert str(path) in message and problem in message and "made again" in message


def test_a_damaged_bpe_cache_is_set_aside_and_learned_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = small_corpus()
    first = build_tokenizer("bpe", corpus, tmp_path, vocab_size=300)
    assert first.file is not None and first.file.parent == tmp_path
    first.file.write_bytes(first.file.read_bytes()[:200])
    again = build_tokenizer("bpe", corpus, tmp_path, vocab_size=300)
    assert again.fingerprint == first.fingerprint  # learned again: the same vocabulary
    assert first.file.with_name(first.file.name + ".bak").exists()
    assert any("damaged" in r.getMessage() for r in caplog.records)


def test_kjv_byte_tokenization(tmp_path: Path) -> None:
    from posexp.data import load_corpus

    corpus = load_corpus("kjv")
    streams = tokenize_splits(corpus, ByteTokenizer(), tmp_path, key="kjv")
    assert len(streams["train"]) > 3_500_000
    x, y = LMBatches(streams["train"], batch_size=4, seq_len=64, seed=0).batch(0)  # memmap input
    assert x.shape == (4, 64) and torch.equal(x[:, 1:], y[:, :-1])


def test_lm_batches_deterministic_shifted_and_resumable() -> None:
    tokens = np.arange(10_000, dtype=np.uint16)  # distinct values, so windows are identifiable
    a = LMBatches(tokens, batch_size=8, seq_len=32, seed=1)
    x, y = a.batch(5)
    assert x.shape == y.shape == (8, 32) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y - x, torch.ones_like(x))
    # A fresh object (a resumed run) reproduces batch 5 without replaying batches 0..4.
    x2, y2 = LMBatches(tokens, batch_size=8, seq_len=32, seed=1).batch(5)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, a.batch(6)[0])
    assert not torch.equal(x, LMBatches(tokens, 8, 32, seed=2).batch(5)[0])
    assert int(y.max()) < 10_000
    y.view(-1)  # contiguous: the loss can flatten it


def test_lm_batches_cover_the_whole_stream_edges() -> None:
    tokens = np.arange(10, dtype=np.uint16)
    b = LMBatches(tokens, batch_size=64, seq_len=9, seed=0)
    x, y = b.batch(0)
    assert torch.equal(x[0], torch.arange(9)) and torch.equal(y[0], torch.arange(1, 10))
    with pytest.raises(PosexpError, match="has 10 tokens, too short for seq_len=10"):
        LMBatches(tokens, batch_size=1, seq_len=10, seed=0)
    # The advice says how much text it takes, not "more data".
    with pytest.raises(PosexpError, match=r"up to 9, or at least 11 tokens of train text$"):
        LMBatches(tokens, batch_size=1, seq_len=10, seed=0)
    with pytest.raises(PosexpError, match=r"up to 9, or a test split of at least 13 tokens$"):
        eval_windows(tokens, seq_len=12, n_tokens=100, split="test")
    with pytest.raises(PosexpError, match="^batch_size must be a positive integer, got 0$"):
        LMBatches(tokens, batch_size=0, seq_len=4, seed=0)


def test_eval_windows_fixed_non_overlapping() -> None:
    tokens = np.arange(100, dtype=np.uint16)
    x, y = eval_windows(tokens, seq_len=8, n_tokens=50)
    assert x.shape == y.shape == (6, 8)  # (50 - 1) // 8 windows
    assert torch.equal(x.flatten(), torch.arange(48)) and torch.equal(y, x + 1)
    x, _ = eval_windows(tokens, seq_len=8, n_tokens=10_000)  # fewer tokens than asked: all
    assert x.shape == (12, 8)
    with pytest.raises(PosexpError, match="the val split has 5 tokens, too short"):
        eval_windows(tokens[:5], seq_len=8, n_tokens=100)


def test_bpe_learns_from_the_first_train_bytes_only() -> None:
    from posexp.data.tokenizers import sample

    assert list(sample(["abc", "d\u00e9fg", "hi"], 6)) == [["abc", "d\u00e9"]]  # 3 + 3 bytes
    assert list(sample(["abc", "d\u00e9fg"], 4)) == [["abc", "d"]]  # never half a character
    assert list(sample(["abc", "d\u00e9fg"], None)) == [["abc", "d\u00e9fg"]]


def test_train_bytes_keys_the_bpe_cache_and_bad_values_are_one_line(tmp_path: Path) -> None:
    corpus = small_corpus()
    some = build_tokenizer("bpe", corpus, tmp_path, vocab_size=300, train_bytes=500)
    every = build_tokenizer("bpe", corpus, tmp_path, vocab_size=300, train_bytes=None)
    assert some.file != every.file and some.fingerprint != every.fingerprint
    with pytest.raises(PosexpError, match=r"^tokenizer.train_bytes must be a positive integer"):
        build_tokenizer("bpe", corpus, tmp_path, train_bytes=0)
