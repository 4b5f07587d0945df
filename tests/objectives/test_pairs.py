"""The `pairs` objective: loss on target tokens only (through the real loss), its metrics and files."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

from posexp.data import ByteTokenizer, Corpus
from posexp.model import GPT, ModelConfig
from posexp.objectives.base import build_objective
from posexp.objectives.pairs import Translation, evenly_spaced
from posexp.runtime.build import Data
from tests.helpers import run_config

PAIRS = [
    ("Forsothe the Lord seide", "And the LORD said"),
    ("and liyt was maad", "and there was light"),
    ("In the bigynnyng God made heuene", "In the beginning God created the heaven"),
    ("Y schal die", "I die"),
    ("and he seide to hir", "and he said unto her"),
    ("the erthe was idel and voide", "the earth was without form, and void"),
]


def make(tmp_path, loss_on="target", heads=4, **translate):
    corpus = Corpus(
        splits={s: ["x"] for s in ("train", "val", "test")},
        pairs={"train": PAIRS, "val": PAIRS[:4], "test": PAIRS[2:]},
        kind="pairs",
    )
    cfg = run_config(
        f"cache_dir={tmp_path / 'cache'}",
        "data=wyc2kjv",
        f"data.loss_on={loss_on}",
        "train.batch_size=3",
        "train.seq_len=96",
        "translate.bleu_examples=3",
        "translate.samples=2",
        *(f"translate.{k}={v}" for k, v in translate.items()),
    )
    data = Data(corpus, ByteTokenizer(), {})
    objective = build_objective(cfg, data, torch.device("cpu"), contextlib.nullcontext)
    model = GPT(
        ModelConfig(
            vocab_size=260, d_model=32, n_layers=2, n_heads=heads, pe="sinusoidal", train_length=96
        )
    )
    return objective, model


def test_pairs_objective_is_registered(tmp_path):
    objective, _ = make(tmp_path)
    assert isinstance(objective, Translation)


@pytest.mark.parametrize("loss_on", ["target", "all"])
def test_loss_reaches_only_target_tokens(tmp_path, loss_on):
    objective, model = make(tmp_path, loss_on)
    x, y = objective.train.batch(0)  # full rows; objective.batch cuts trailing padding
    captured = {}
    model.lm_head.register_forward_hook(lambda m, i, out: captured.setdefault("logits", out))
    loss = model(x, y)["loss"]
    # Gradient of the real loss w.r.t. the logits: nonzero exactly where a target carries loss.
    grad = torch.autograd.grad(loss, captured["logits"])[0].abs().sum(-1)
    sep, eos = ByteTokenizer.sep_id, ByteTokenizer.eos_id
    for row in range(x.shape[0]):
        ids = x[row].tolist()
        s, e = ids.index(sep), ids.index(eos)  # rows are short here: eos is an input, then padding
        has_loss = grad[row] > 0
        assert y[row, e - 1] == eos
        if loss_on == "target":  # positions s..e-1 predict the target bytes and eos
            assert not has_loss[:s].any()
            assert has_loss[s:e].all() and int(has_loss.sum()) == e - s
        else:
            assert has_loss[:e].all() and int(has_loss.sum()) == e
        assert not has_loss[e:].any()  # padding never carries loss


def test_trimmed_batches_give_the_same_loss(tmp_path):
    objective, model = make(tmp_path)
    with torch.no_grad():
        check_trim(objective, model)


def check_trim(objective, model):
    for step in range(3):
        full, trimmed = objective.train.batch(step), objective.batch(step)
        assert trimmed[0].shape[1] < full[0].shape[1] == 96
        assert float(model(*trimmed)["loss"]) == pytest.approx(
            float(model(*full)["loss"]), rel=1e-5
        )


def test_val_loss_is_mean_cross_entropy_on_target_tokens(tmp_path):
    objective, model = make(tmp_path, loss_on="all")  # training loss_on does not change val
    tok = ByteTokenizer()
    total, count = 0.0, 0
    with torch.no_grad():
        for src, tgt in PAIRS[:4]:
            s, t = tok.encode(src), tok.encode(tgt)
            seq = torch.tensor([[*s, tok.sep_id, *t, tok.eos_id]])
            logits = model(seq[:, :-1])["logits"][0, len(s) :]
            total += float(F.cross_entropy(logits, seq[0, len(s) + 1 :], reduction="sum"))
            count += len(t) + 1
    assert objective.target_loss(model) == pytest.approx(total / count, rel=1e-5)


def test_evaluate_and_finish_log_metrics_images_text_and_files(tmp_path, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    objective, model = make(tmp_path, heads=8)
    run = tmp_path / "run"
    writer = SummaryWriter(str(run))
    metrics = objective.evaluate(model, 5, writer)
    assert set(metrics) == {
        "val/loss",
        "val/ppl",
        "val/bleu",
        "val/chrf",
        "val/copy_bleu",
        "val/copy_chrf",
    }
    assert metrics["val/ppl"] == pytest.approx(math.exp(metrics["val/loss"]))
    with caplog.at_level("INFO", logger="posexp"):
        final = objective.finish(model, writer)
    writer.close()
    # The test split's decoding says what it does, and its result.
    assert f"translating {len(PAIRS[2:])} test verses (beam 4) for the final BLEU" in caplog.text
    assert f"test BLEU {final['final/bleu']:.2f}  chrF {final['final/chrf']:.2f}" in caplog.text
    for key in (
        "final/val_loss",
        "final/val_ppl",
        "final/bleu",
        "final/chrf",
        "final/copy_bleu",
        "final/copy_chrf",
        "final/val_bleu",
    ):
        assert math.isfinite(final[key]), key
    assert sorted(p.name for p in (run / "attention").iterdir()) == [
        "layer0.png",
        "layer0.svg",
        "layer1.png",
        "layer1.svg",
    ]  # PNG plus a vector copy
    lines = (run / "translations_test.tsv").read_text().splitlines()
    assert lines[0] == "source\treference\thypothesis" and len(lines) == 1 + len(PAIRS[2:])
    events = EventAccumulator(str(run), size_guidance={"images": 0, "tensors": 0}).Reload()
    assert {"attention/layer_0", "attention/layer_1"} <= set(events.Tags()["images"])
    assert {"test/bleu", "test/chrf", "test/copy_bleu"} <= set(events.Tags()["scalars"])
    text = events.Tensors("val/samples/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| source | reference | hypothesis |" in text


def test_evenly_spaced_subset_is_fixed():
    assert evenly_spaced(10, None) == list(range(10))
    assert evenly_spaced(10, 3) == [0, 4, 9] or evenly_spaced(10, 3) == [0, 5, 9]
    assert evenly_spaced(10, 3) == evenly_spaced(10, 3)
