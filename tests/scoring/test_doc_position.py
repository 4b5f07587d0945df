"""doc_position: loss by position within a document, on a model whose loss at each document
offset is known in closed form."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from posexp.errors import PosexpError
from posexp.extension.spec import MethodSpec
from posexp.scoring import Scoring, get_scorer
from posexp.scoring.records import Checkpoint, Record
from posexp.scoring.text import TextSource, log_edges
from posexp.scoring.windows import long_documents, short_context

V = 4096
EOS = V - 1


class OffsetModel(torch.nn.Module):
    """A stub language model over documents whose tokens are their own offsets (0, 1, 2, ...):
    at an input token j it puts logit a(j) = log(j + 1) on token j + 1 and 0 on every other, so
    the loss of target j + 1 is log(e^a + V - 1) - a, a known function of the document offset
    (any other target: log(e^a + V - 1))."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = torch.zeros(*x.shape, V, dtype=torch.float64)
        a = torch.log(x.double() + 1)
        logits.scatter_(-1, (x + 1).clamp(max=V - 1)[..., None], a[..., None])
        return {"logits": logits}


def offset_loss(j: int, target: int) -> float:
    """The stub's loss at input token j for ``target``, computed apart from the model."""
    a = math.log(j + 1)
    return math.log(math.exp(a) + V - 1) - (a if target == j + 1 else 0.0)


def corpus(lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Documents of these lengths (eos last), each counting 0, 1, 2, ...; their starts."""
    docs = [[*range(n - 1), EOS] for n in lengths]
    starts = np.cumsum([0, *lengths[:-1]]).astype(np.int64)
    return np.array([t for d in docs for t in d], dtype=np.int64), starts


@dataclasses.dataclass
class Cell:
    length: int
    stride: int | None = None


def scoring(tokens: np.ndarray) -> Scoring:
    return Scoring(torch.device("cpu"), batch_tokens=256, tokens=torch.from_numpy(tokens))


def test_log_edges_double_from_one_up_to_the_length():
    assert log_edges(64) == [0, 1, 2, 4, 8, 16, 32, 64]
    assert log_edges(48) == [0, 1, 2, 4, 8, 16, 32, 48]
    assert log_edges(1) == [0, 1]


def test_windows_start_at_documents_and_never_cross_one():
    lengths = [10, 40, 33, 32, 100, 5, 60]
    tokens, starts = corpus(lengths)
    begins = long_documents(starts, len(tokens), 32, count=10)
    # documents of at least 33 tokens: 40, 33, 100, 60 (32 holds the window but not its target)
    assert begins == [int(starts[i]) for i in (1, 2, 4, 6)]
    ends = dict(zip(starts.tolist(), (starts + np.array(lengths)).tolist(), strict=True))
    work = get_scorer("doc_position").cut(Cell(32), TextSource(10_000, len(tokens), starts))
    for w in work.data:
        assert w.begin in ends and w.end + 1 <= ends[w.begin]  # targets inside the document
    assert work.reach == max(w.end for w in work.data) + 1
    # fewer wanted than qualify: spread over them evenly, first and last kept
    assert long_documents(starts, len(tokens), 32, count=2) == [int(starts[1]), int(starts[6])]


def test_bucket_means_match_the_closed_form_loss_by_document_offset():
    lengths = [70, 20, 65, 200, 64, 90]  # 64 and 20: too short for a window of 64
    tokens, starts = corpus(lengths)
    work = get_scorer("doc_position").cut(Cell(64), TextSource(64 * 10, len(tokens), starts))
    seen = []
    s = scoring(tokens)
    s.advance = seen.append
    got = get_scorer("doc_position").score(OffsetModel(), work, s)

    # Independently: every document of >= 65 tokens, positions t = 0..63, target offset t + 1.
    used = [n for n in lengths if n >= 65]
    per_t = {t: [] for t in range(64)}
    for n in used:
        doc = [*range(n - 1), EOS]
        for t in range(64):
            per_t[t].append(offset_loss(doc[t], doc[t + 1]))
    edges = [0, 1, 2, 4, 8, 16, 32, 64]
    want = [
        np.mean([v for t in range(lo, hi) for v in per_t[t]])
        for lo, hi in zip(edges, edges[1:], strict=False)
    ]
    assert got["documents"] == len(used) == 4
    assert got["position_edges"] == edges
    assert got["position_tokens"] == [
        (hi - lo) * 4 for lo, hi in zip(edges, edges[1:], strict=False)
    ]
    assert got["position_loss"] == pytest.approx(want, abs=1e-5)
    everything = [v for vs in per_t.values() for v in vs]
    assert got["loss"] == pytest.approx(np.mean(everything))
    assert got["ppl"] == pytest.approx(math.exp(np.mean(everything)))
    assert got["tokens"] == 4 * 64 and sum(seen) == work.size == 4 * 64
    # the loss falls with the document offset: the curve says the model uses its context
    assert got["position_loss"][-1] < got["position_loss"][1]


def test_a_split_without_long_documents_is_a_note_not_a_crash():
    tokens, starts = corpus([20, 30, 40])
    work = get_scorer("doc_position").cut(Cell(64), TextSource(1000, len(tokens), starts))
    assert work.data is None and work.size == 0
    assert work.note == (
        "no test document holds 65 tokens (a window of 64 and its targets): the longest of 3 has 40"
    )
    none = get_scorer("doc_position").cut(Cell(16), TextSource(1000, len(tokens), None))
    assert none.note == "the test split keeps no document starts"


def test_short_context_windows_score_each_target_once_within_the_document():
    for stride in (1, 3, 16, 40):
        windows = short_context(100, 64, 16, stride)
        targets = [t for w in windows for t in range(w.end - w.score + 1, w.end + 1)]
        assert targets == list(range(100 + 16 + 1, 100 + 64 + 1))
        assert all(w.length == 16 and w.begin >= 100 for w in windows)


def doc_record(**values) -> dict:
    r = Record(
        spec=MethodSpec("none"),
        length=64,
        protocol="doc_position",
        factor=1.0,
        sample_size=640,
        metric="ppl",
        checkpoint=Checkpoint(300, "ffff000011112222"),
        values={
            "ppl": 3.0,
            "loss": 1.1,
            "tokens": 256,
            "documents": 4,
            "position_edges": [0, 1, 2, 4],
            "position_loss": [2.0, 1.5, None],
            "position_tokens": [4, 4, 0],
        },
    )
    d = json.loads(json.dumps(r.to_dict()))
    d.update(values)
    return d


def test_records_keep_lists_of_numbers_and_set_aside_bad_ones():
    back = Record.from_dict(doc_record())
    assert back.values["position_loss"] == [2.0, 1.5, None]
    with pytest.raises(PosexpError, match=r"record\.position_loss must be a list of numbers"):
        Record.from_dict(doc_record(position_loss=[1.0, "x"]))
    with pytest.raises(PosexpError, match=r"record\.position_edges must be a list of numbers"):
        Record.from_dict(doc_record(position_edges=3))
    # a list where a scorer declares none is still refused
    with pytest.raises(PosexpError, match=r"record\.documents must be a number"):
        Record.from_dict(doc_record(documents=[1, 2]))


def test_the_context_use_protocols_run_end_to_end(tmp_path, cache):
    from posexp.scoring.records import load
    from posexp.store.rundir import RunDir
    from tests.helpers import TINY, posexp, run_dirs

    posexp(tmp_path, cache, "train", "pe=rope", *TINY)
    (run,) = run_dirs(tmp_path)
    args = ["--lengths", "32,64", "--method", "none", "--tokens", "256"]
    posexp(
        tmp_path, cache, "eval-extrapolate", "--run", str(run), *args, "--protocol",
        "doc_position,context_gain",
    )  # fmt: skip
    recs = {(r.protocol, r.length): r for r in load(RunDir(run)).current}  # read back, checked
    assert set(recs) == {(p, n) for p in ("doc_position", "context_gain") for n in (32, 64)}
    doc = recs["doc_position", 64].values
    assert doc["position_edges"] == log_edges(64) and doc["documents"] == 256 // 64
    assert sum(doc["position_tokens"]) == doc["tokens"] == 64 * doc["documents"]
    assert recs["context_gain", 32].note.endswith("no position past L0 = 32 in a window of 32")
    gain = recs["context_gain", 64]
    assert gain.stride == 16 and gain.values["position_edges"] == [32, 64]
    assert gain.values["tokens"] == 32 * gain.values["documents"]
    assert math.isfinite(gain.values["gain"])
    for name in ("context_use_doc_position.png", "context_use_context_gain.png"):
        assert (run / "eval" / name).is_file()
