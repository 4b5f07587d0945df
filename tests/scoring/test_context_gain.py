"""context_gain: the loss with the whole document as context minus the loss with L0 of it, on a
model whose loss depends on its context length in closed form."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from posexp.scoring import Scoring, get_scorer
from posexp.scoring.context_gain import KEY_GAIN, KEY_LOSS, gain_edges, gain_fields
from posexp.scoring.text import TextSource

V = 4096
EOS = V - 1
L0, L = 16, 64
RATE = 0.25


class ContextModel(torch.nn.Module):
    """A stub over documents that count 0, 1, 2, ...: with c tokens of context (the window
    position + 1) it puts logit a(c) = RATE·c on the next count, so the next token's loss is
    log(e^a + V - 1) - a: the more context, the lower."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        c = torch.arange(1, x.shape[1] + 1, dtype=torch.float64).expand(x.shape)
        logits = torch.zeros(*x.shape, V, dtype=torch.float64)
        logits.scatter_(-1, (x + 1).clamp(max=V - 1)[..., None], (RATE * c)[..., None])
        return {"logits": logits}


def loss_with(c: int, right: bool = True) -> float:
    """The stub's loss with ``c`` tokens of context on the next count (``right``) or another
    token (a document's eos)."""
    a = RATE * c
    return math.log(math.exp(a) + V - 1) - (a if right else 0.0)


def short_context_of(t: int, stride: int) -> int:
    """Tokens of context the short pass gives the target at window position t >= L0: the
    short window scoring it ends at L0 + stride·m (the first such end at or past t + 1, at most
    L), and reads the L0 inputs before that end."""
    end = min(L0 + stride * math.ceil((t + 1 - L0) / stride), L)
    return L0 - (end - (t + 1))


@dataclasses.dataclass
class Cell:
    length: int
    stride: int | None = None


LENGTHS = (80, 30, 65, 100)  # 30 holds no window of 64; 65's last target is its eos


def run(stride: int, lengths=LENGTHS):
    docs = [[*range(n - 1), EOS] for n in lengths]
    tokens = np.array([t for d in docs for t in d], dtype=np.int64)
    starts = np.cumsum([0, *lengths[:-1]]).astype(np.int64)
    scorer = get_scorer("context_gain")
    work = scorer.cut(Cell(L, stride), TextSource(L * 10, len(tokens), starts, train_length=L0))
    seen = []
    scoring = Scoring(torch.device("cpu"), 512, tokens=torch.from_numpy(tokens))
    scoring.advance = seen.append
    got = scorer.score(ContextModel(), work, scoring)
    assert sum(seen) == work.size
    return got, sum(n >= L + 1 for n in lengths)


@pytest.mark.parametrize("stride", [1, 4, 16])
def test_gain_by_position_matches_the_closed_form(stride):
    got, docs = run(stride)
    # every target at t >= L0 in each long document: long context t + 1, short as computed;
    # the target is the next count, except a document's eos
    ts = list(range(L0, L))
    long, short, pos = [], [], []
    for n in (n for n in LENGTHS if n >= L + 1):
        for t in ts:
            right = t + 1 < n - 1
            long.append(loss_with(t + 1, right))
            short.append(loss_with(short_context_of(t, stride), right))
            pos.append(t)
    long, short, pos = np.array(long), np.array(short), np.array(pos)
    gain = short - long
    edges = [16, 32, 64]
    assert got["position_edges"] == edges == gain_edges(L, L0)
    assert got["documents"] == docs == 3
    assert got["tokens"] == docs * (L - L0)
    spans = list(zip(edges, edges[1:], strict=False))
    want = [gain[(pos >= lo) & (pos < hi)].mean() for lo, hi in spans]
    assert got["position_gain"] == pytest.approx(want, abs=1e-5)
    want_long = [long[(pos >= lo) & (pos < hi)].mean() for lo, hi in spans]
    assert got["position_loss"] == pytest.approx(want_long, abs=1e-5)
    assert got["gain"] == pytest.approx(gain.mean())
    assert got["short_loss"] == pytest.approx(short.mean())
    key = (gain > KEY_GAIN) & (long < KEY_LOSS)
    assert 0 < key.sum() < len(key)  # the stub makes some key tokens and some not
    assert got["key_tokens"] == key.sum()
    assert got["key_share"] == pytest.approx(key.mean())
    assert got["key_loss"] == pytest.approx(long[key].mean())
    assert got["key_short_loss"] == pytest.approx(short[key].mean())
    assert got["key_ppl"] == pytest.approx(math.exp(long[key].mean()))


def test_stride_one_is_exactly_l0_of_context():
    assert [short_context_of(t, 1) for t in range(L0, L)] == [L0] * (L - L0)
    exact, _ = run(1)
    coarse, _ = run(16)
    # fewer tokens of context in the short pass: its loss, and the gain, run high
    assert coarse["short_loss"] > exact["short_loss"] and coarse["gain"] > exact["gain"]
    assert coarse["loss"] == pytest.approx(exact["loss"])


def test_key_tokens_need_both_thresholds_strictly():
    long = np.array([0.5, 0.5, 2.0, 1.0, 3.0])
    short = np.array([2.5, 2.6, 5.0, 1.5, 6.0])
    # gains 2.0 (not > 2), 2.1 (key), 3.0 with long 2.0 (not < 2), 0.5, 3.0 with long 3.0
    got = gain_fields(long, short, np.array([16, 17, 33, 40, 63]), [16, 32, 64])
    assert got["key_tokens"] == 1 and got["key_share"] == pytest.approx(0.2)
    assert got["key_loss"] == pytest.approx(0.5) and got["key_short_loss"] == pytest.approx(2.6)
    assert got["position_tokens"] == [2, 3]
    assert got["position_gain"] == pytest.approx([2.05, (3.0 + 0.5 + 3.0) / 3])
    looser = gain_fields(long, short, np.arange(5) + 16, [16, 64], key_gain=1.0, key_loss=5.0)
    assert looser["key_tokens"] == 4
    none = gain_fields(long[:0], short[:0], np.zeros(0, np.int64), [16, 64])
    assert none["gain"] is None and none["key_ppl"] is None and none["position_gain"] == [None]


def test_nothing_past_l0_is_a_note():
    tokens = np.arange(200)
    starts = np.array([0], dtype=np.int64)
    work = get_scorer("context_gain").cut(Cell(16, 8), TextSource(100, 200, starts, 16))
    assert work.note == "no position past L0 = 16 in a window of 16" and work.data is None
    short_docs = get_scorer("context_gain").cut(Cell(64, 8), TextSource(100, 60, starts, 16))
    assert short_docs.note.startswith("no test document holds 65 tokens")
    assert tokens.size  # the split itself is never read by cut
