"""oneDNN's fp32 linear layers: the same products and gradients as torch's, in true fp32
arithmetic (measured against fp64), taken only where they apply, and a whole model that trains
to the same numbers and resumes bit for bit on them."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from posexp.commands.train import run_training
from posexp.kernels import onednn_linear
from posexp.kernels.choice import KernelChoice
from posexp.kernels.onednn_linear import Linear, OneDNNLinear, linear
from posexp.model import GPT, ModelConfig
from tests.helpers import TINY, run_config, train_killed_halfway, weights_sha256

pytestmark = pytest.mark.skipif(
    not onednn_linear.available(), reason="this torch has no oneDNN linear op"
)


@pytest.fixture
def every_product():
    """oneDNN for every product, however small (the tests' shapes are below MIN_MACS); a patch
    of its own, which train_killed_halfway's monkeypatch.undo() leaves in place."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onednn_linear, "MIN_MACS", 0)
        yield


def grads(fn, x, w, probe):
    """The output of ``fn(x, w)`` and the gradients of <output, probe> by x and w."""
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    y = fn(x, w)
    return (y, *torch.autograd.grad(y, (x, w), probe))


@pytest.mark.parametrize(
    ("x_shape", "out"),
    [
        ((64, 32), 96),  # dY wider than X: the weight's gradient transposes X
        ((4, 16, 96), 32),  # dY narrower: it transposes dY
        ((3, 5, 7, 24), 24),
        ((1, 1, 40), 260),  # one token, as generation feeds them
    ],
)
def test_product_and_gradients_match_torch_and_are_true_fp32(x_shape, out):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*x_shape, generator=g)
    w = torch.randn(out, x_shape[-1], generator=g)
    probe = torch.randn(*x_shape[:-1], out, generator=g)
    mine = grads(OneDNNLinear.apply, x, w, probe)
    theirs = grads(F.linear, x, w, probe)
    exact = grads(F.linear, x.double(), w.double(), probe.double())
    for a, b, ref in zip(mine, theirs, exact, strict=True):
        assert a.shape == b.shape and a.dtype == torch.float32
        # Within a few fp32 roundings of fp64, as torch's own is: a kernel that rounded its
        # operands to bf16 or tf32 internally would be off by ~1e-3 of the magnitude.
        scale = ref.abs().max().item()
        assert (a.double() - ref).abs().max().item() <= max(
            4 * (b.double() - ref).abs().max().item(), 1e-6 * scale
        )


def test_a_non_contiguous_input_and_one_side_without_gradient():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 48, 16, generator=g).transpose(0, 1)  # (48, 8, 16), strided
    w = torch.randn(12, 16, generator=g, requires_grad=True)
    y = OneDNNLinear.apply(x, w)
    torch.testing.assert_close(y, F.linear(x, w.detach()))
    (dw,) = torch.autograd.grad(y.sum(), (w,))  # x needs no gradient: only W's is computed
    torch.testing.assert_close(dw, torch.ones(48 * 8, 12).t() @ x.reshape(-1, 16))
    frozen = torch.randn(12, 16, generator=g)
    xg = x.detach().requires_grad_()
    (dx,) = torch.autograd.grad(OneDNNLinear.apply(xg, frozen).sum(), (xg,))
    torch.testing.assert_close(dx, torch.ones(48, 8, 12) @ frozen)


def test_it_applies_to_large_enough_fp32_products_on_a_cpu_without_autocast_only(monkeypatch):
    x, w = torch.randn(64, 256), torch.randn(256, 256)  # 2**22 multiply-adds
    assert onednn_linear.applies(x, w)
    assert not onednn_linear.applies(x[:63], w)  # smaller products are faster on torch
    assert not onednn_linear.applies(x.bfloat16(), w.bfloat16())
    assert not onednn_linear.applies(torch.randn(0, 256), w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not onednn_linear.applies(x, w)
        y = linear(x, w, "onednn")  # falls back to torch, which autocasts
    assert y.dtype == torch.bfloat16
    calls = []
    monkeypatch.setattr(OneDNNLinear, "apply", lambda *a: calls.append(a) or F.linear(*a))
    linear(x, w, "torch")
    assert calls == []
    linear(x, w, "onednn")
    assert len(calls) == 1


def test_the_layer_keeps_nn_linears_state_dict():
    plain = torch.nn.Linear(8, 5, bias=False)
    layer = Linear(8, 5, "onednn")
    layer.load_state_dict(plain.state_dict())  # strict: the same keys, no bias
    x = torch.randn(2, 8)
    torch.testing.assert_close(layer(x), plain(x))


def test_a_model_with_tied_embeddings_gives_torchs_loss_and_gradients(every_product):
    cfg = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=2, pe="rope")
    torch.manual_seed(0)
    ref = GPT(cfg)
    mine = GPT(cfg, KernelChoice(linear="onednn"))
    mine.load_state_dict(ref.state_dict())
    tokens = torch.randint(0, 40, (3, 17))
    losses = []
    for model in (ref, mine):
        logits = model(tokens[:, :-1])["logits"]
        loss = F.cross_entropy(logits.reshape(-1, 40), tokens[:, 1:].reshape(-1))
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0])
    for (name, a), b in zip(ref.named_parameters(), mine.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, msg=name)  # lm_head's = tok_emb's, summed


def test_measure_speedup_times_both_kernels(monkeypatch):
    assert onednn_linear.measure_speedup(64, 16, 64, reps=1) > 0
    monkeypatch.setattr(onednn_linear, "available", lambda: False)
    assert onednn_linear.measure_speedup(64, 16, 64, reps=1) == 0.0


def test_a_run_trains_on_onednn_records_it_and_resumes_bitwise(
    tmp_path, monkeypatch, every_product
):
    cfg = run_config(*TINY, "train.linear=onednn", f"cache_dir={tmp_path / 'cache'}")
    run_training(cfg, tmp_path / "full")
    train_killed_halfway(cfg, tmp_path / "cut", monkeypatch)
    resumed = cfg.replace(resume=str(tmp_path / "cut"), train=cfg.train)
    run_training(resumed, tmp_path / "cut")
    assert weights_sha256(tmp_path / "full") == weights_sha256(tmp_path / "cut")
    meta = json.loads((tmp_path / "cut" / "checkpoint" / "meta.json").read_text())
    assert meta["kernels"]["linear"] == "onednn"
    sessions = json.loads((tmp_path / "cut" / "provenance.json").read_text())["sessions"]
    assert [s["linear_kernel"] for s in sessions] == ["onednn", "onednn"]
    # The same run on torch's kernel ends at the same loss, to fp32 rounding.
    run_training(run_config(*TINY, f"cache_dir={tmp_path / 'cache'}"), tmp_path / "torch")
    losses = [
        json.loads((tmp_path / d / "results.json").read_text())["final/val_loss"]
        for d in ("full", "torch")
    ]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
