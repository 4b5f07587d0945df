"""PairBatches: one example per row, padding, truncation and the loss mask (through the loss)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posexp.data import IGNORE, ByteTokenizer, PairBatches
from posexp.errors import PosexpError

PAIRS = [
    ("Forsothe the Lord seide", "And the LORD said"),
    ("Turne ayen", "Return"),
    ("In the bigynnyng God made of nouyt heuene and erthe", "In the beginning God created"),
    ("ab", "cd"),
]


def row_parts(inputs: torch.Tensor, tok: ByteTokenizer) -> list[int]:
    """Index of the first pad in each row (row length if none)."""
    out = []
    for row in inputs.tolist():
        out.append(row.index(tok.pad_id) if tok.pad_id in row else len(row))
    return out


def test_rows_are_one_example_padded_right() -> None:
    tok = ByteTokenizer()
    pb = PairBatches(PAIRS, tok, batch_size=4, seq_len=96, seed=0)
    x, y = pb.collate(range(4))
    assert x.shape == y.shape == (4, 96) and x.dtype == y.dtype == torch.int64
    for r, (src, tgt) in enumerate(PAIRS):
        seq = [*tok.encode(src), tok.sep_id, *tok.encode(tgt), tok.eos_id]
        assert x[r, : len(seq)].tolist() == seq  # the example, then only padding
        assert (x[r, len(seq) :] == tok.pad_id).all()
        assert (x[r] == tok.sep_id).sum() == 1 and (x[r] == tok.eos_id).sum() == 1
        # No pad inside an example: all pads form one suffix.
        n = row_parts(x[r : r + 1], tok)[0]
        assert (x[r, :n] != tok.pad_id).all()
        # Loss only on target tokens and eos; they equal the next input token.
        labelled = (y[r] != IGNORE).nonzero().flatten().tolist()
        first = len(tok.encode(src))  # position of sep predicts the first target token
        assert labelled == list(range(first, len(seq) - 1))
        assert tok.decode(y[r, labelled].tolist()) == tgt
        assert y[r, len(seq) - 2] == tok.eos_id


def test_loss_mask_through_the_actual_loss() -> None:
    tok = ByteTokenizer()
    pb = PairBatches(PAIRS, tok, batch_size=4, seq_len=96, seed=0)
    x, y = pb.collate(range(4))
    V = tok.vocab_size
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(*x.shape, V, generator=gen)

    def loss(lg: torch.Tensor) -> float:
        return F.cross_entropy(lg.view(-1, V), y.view(-1), ignore_index=IGNORE).item()

    base = loss(logits)
    source_pos = torch.zeros(x.shape, dtype=torch.bool)  # positions predicting source or sep
    for r, (src, _) in enumerate(PAIRS):
        source_pos[r, : len(tok.encode(src))] = True
    # Padding, and the eos position (it would predict the first pad): never any loss.
    pad_pos = (x == tok.pad_id) | (x == tok.eos_id)
    for mask in (source_pos, pad_pos):
        noisy = logits.clone()
        noisy[mask] += 10 * torch.randn(int(mask.sum()), V, generator=gen)
        assert loss(noisy) == pytest.approx(base, abs=1e-6)
    target_pos = (y != IGNORE) & ~source_pos
    assert target_pos.any()
    noisy = logits.clone()
    noisy[target_pos] += 10 * torch.randn(int(target_pos.sum()), V, generator=gen)
    assert abs(loss(noisy) - base) > 0.1

    all_y = PairBatches(PAIRS, tok, 4, 96, 0, loss_on="all").collate(range(4))[1]
    # loss_on="all": source and sep predictions carry loss too; padding still never does.
    assert ((all_y != IGNORE) == ~pad_pos).all()
    assert ((all_y != IGNORE) & ~(y != IGNORE)).sum() == source_pos.sum()


def test_truncation_drops_source_end_first_then_target() -> None:
    tok = ByteTokenizer()
    pb = PairBatches([("abcdefgh", "xyz")], tok, batch_size=1, seq_len=7, seed=0)
    x, y = pb.collate([0])
    row = [*x[0].tolist(), y[0, -1].item()]  # the full seq_len + 1 row
    assert row == [*b"abc", tok.sep_id, *b"xyz", tok.eos_id]
    pb = PairBatches([("abcdefgh", "uvwxyz")], tok, batch_size=1, seq_len=4, seed=0)
    x, y = pb.collate([0])
    assert x[0].tolist() == [tok.sep_id, *b"uvw"] and y[0].tolist() == list(b"uvwx")


def test_batches_deterministic_and_prompt(tmp_path: Path) -> None:
    tok = ByteTokenizer()
    pb = PairBatches(PAIRS, tok, batch_size=3, seq_len=32, seed=7, cache_dir=tmp_path)
    x, y = pb.batch(3)
    x2, y2 = PairBatches(PAIRS, tok, 3, 32, seed=7, cache_dir=tmp_path).batch(3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert any(not torch.equal(x, pb.batch(s)[0]) for s in range(4, 8))
    assert len(list(tmp_path.glob("*.pairs.npz"))) == 1
    assert pb.encode_prompt("ab") == [*b"ab", tok.sep_id]
    big = PairBatches(PAIRS, tok, batch_size=10, seq_len=32, seed=0).batch(0)[0]
    assert big.shape == (10, 32)  # more rows than pairs: sampled with replacement


def test_pair_cache_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = ByteTokenizer()
    first = PairBatches(PAIRS, tok, 2, 16, 0, cache_dir=tmp_path).arrays

    def fail(*args):
        raise AssertionError("re-tokenized although cached")

    monkeypatch.setattr(ByteTokenizer, "encode_batch", fail)
    again = PairBatches(PAIRS, tok, 2, 16, 0, cache_dir=tmp_path).arrays
    assert all(np.array_equal(first[k], again[k]) for k in first)


def test_pair_errors() -> None:
    tok = ByteTokenizer()
    with pytest.raises(PosexpError, match="unknown data.loss_on 'source'; allowed: all, target"):
        PairBatches(PAIRS, tok, 2, 16, 0, loss_on="source")
    with pytest.raises(PosexpError, match="no \\(source, target\\) pairs"):
        PairBatches([], tok, 2, 16, 0)


@pytest.mark.parametrize("damage", ["truncate", "offsets", "ids"])
def test_a_damaged_pairs_cache_is_set_aside_and_made_again(tmp_path, caplog, damage):
    from posexp.data.pairs import tokenize_pairs

    pairs = [("in the beginning", "In the beginning"), ("and god said", "And God said")]
    tok = ByteTokenizer()
    want = tokenize_pairs(pairs, tok, tmp_path)
    (path,) = tmp_path.glob("*.pairs.npz")
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:100])
    else:
        bad = dict(want)
        if damage == "offsets":
            bad["src_off"] = bad["src_off"][:-1]
        else:
            bad["tgt"] = bad["tgt"].copy()
            bad["tgt"][0] = tok.vocab_size + 3
        with open(path, "wb") as f:
            np.savez(f, **bad)
    got = tokenize_pairs(pairs, tok, tmp_path)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    assert path.with_name(path.name + ".bak").exists()
    assert any("damaged" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)


def test_jobs_that_miss_the_cache_together_tokenize_once(tmp_path, monkeypatch, caplog):
    # Packed jobs on one GPU (or a sweep's processes) started together each tokenized the same
    # pairs; now the others wait on the entry's lock, then read what the first one made.
    import logging
    import shutil

    from posexp.data import pairs as pairs_module

    caplog.set_level(logging.INFO, logger="posexp")
    tok, real_lock, other = ByteTokenizer(), pairs_module.cache_lock, tmp_path / "other"
    made: list[Path] = []

    @contextlib.contextmanager
    def lock_taken_by_another_job(entry):
        if not made:  # the other job holds the lock and makes the entry meanwhile
            made.append(entry)
            pairs_module.tokenize_pairs(PAIRS, tok, other)
            shutil.copy(next(other.glob("*.pairs.npz")), entry)
        with real_lock(entry):
            yield

    monkeypatch.setattr(pairs_module, "cache_lock", lock_taken_by_another_job)
    got = pairs_module.tokenize_pairs(PAIRS, tok, tmp_path)
    assert made and made[0].parent == tmp_path
    want = pairs_module.encode_pairs(PAIRS, tok)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    said = [r.getMessage() for r in caplog.records if "tokenizing" in r.getMessage()]
    assert len(said) == 1 and str(other) in said[0]  # the other job's, not this one's
    assert not list(tmp_path.glob("*.lock"))  # gone once the entry is made
