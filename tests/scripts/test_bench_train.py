"""scripts/bench_train.py and bench_models.py: the same step for every model, rates from
interleaved rounds, a profile sorted by kind of work."""

from __future__ import annotations

import sys

import pytest
import torch

from posexp.model import ModelConfig
from scripts import bench_models, bench_train

TINY = ModelConfig(vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=16)


@pytest.mark.parametrize(
    "names, kind",
    [
        (["aten::mm", "MmBackward0"], "matmul"),
        (["mkldnn::_linear_pointwise", "OneDNNLinearBackward"], "matmul"),
        (["aten::copy_", "aten::contiguous", "OneDNNLinearBackward"], "linear copies"),
        (["aten::bmm", "posexp::matmul_attention"], "attention"),
        (["aten::bmm", "BmmBackward0"], "attention"),
        (["aten::_softmax_backward_data", "SoftmaxBackward0"], "attention"),
        (["aten::_log_softmax_backward_data", "LogSoftmaxBackward0"], "loss"),
        (["aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu"], "attention"),
        (["aten::mul", "_RotationBackward", "autograd::engine::evaluate_function"], "rotation"),
        (["aten::mul", "aten::lerp_", "Optimizer.step#AdamW.step"], "optimizer"),
        (["aten::native_layer_norm", "aten::layer_norm"], "norm"),
        (["aten::_to_copy", "aten::to"], "casts"),
        (["aten::gelu_backward"], "activation"),
        (["aten::add"], "other"),
    ],
)
def test_profile_kinds_follow_the_op_and_its_callers(names, kind):
    assert bench_models.kind_of(names) == kind


def test_every_peer_trains_at_posexp_shape():
    # The same interface and a finite loss that falls: the step really trains each peer.
    for peer, (builder, _, _) in bench_models.PEERS.items():
        if bench_models.missing_package(peer):
            continue  # the optional `bench` extra
        torch.manual_seed(0)
        model = builder(TINY, 16)
        x = torch.randint(0, 260, (4, 16))
        before = model(x, x)["loss"].item()
        step = bench_models.training_step(model, 4, 16, 260, torch.device("cpu"), "fp32")
        for _ in range(5):
            step()
        after = model(x, x)["loss"].item()
        assert after < before, peer


def test_interleaved_rates_time_every_variant_in_each_round():
    calls: list[str] = []
    variants = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    rates = bench_train.interleaved_rates(variants, torch.device("cpu"), 100, rounds=2, steps=3)
    assert set(rates) == set("abc") and all(r > 0 for r in rates.values())
    timed = calls[6:]  # after two warm-up calls each
    assert timed == list("aaabbbccc") + list("cccbbbaaa")  # the second round runs backwards


def test_the_script_prints_every_row_and_the_profile(capsys, monkeypatch):
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "bench_train.py",
            "--model=tiny",
            "--batch=2",
            "--seq-len=16",
            "--rounds=1",
            "--steps=1",
            "--pe=learned,rope",
            "--peers=plain",
            "--precision=fp32,bf16",
            "--profile",
            "--no-loop",
        ],
    )
    bench_train.main()
    out = capsys.readouterr().out
    for row in ("nanoGPT-style (learned), fp32", "posexp rope, bf16", "posexp learned, fp32"):
        assert row in out
    assert "where a posexp rope step's time goes" in out and "matmul" in out


def test_both_causal_kernels_get_rows_and_posexp_s_own_choice_is_said(capsys, monkeypatch):
    from posexp.runtime import kernel_choice

    monkeypatch.setattr(kernel_choice, "measure_speedup", lambda *shape: 1.5)
    monkeypatch.setattr(kernel_choice.onednn_linear, "measure_speedup", lambda *shape: 2.0)
    measured = bench_train.interleaved_rates

    def onednn_twice_as_fast(steps, *rest):
        # Which fp32 kernel is faster is measured, so it differs from run to run: set here.
        rates = measured(steps, *rest)
        rates["matmul fp32 onednn"] = 2 * rates["matmul fp32"]
        return rates

    monkeypatch.setattr(bench_train, "interleaved_rates", onednn_twice_as_fast)
    args = ["--model=tiny", "--batch=2", "--seq-len=16", "--rounds=1", "--steps=1", "--no-loop"]
    argv = ["bench_train.py", *args, "--pe=rope", "--peers=", "--causal=both", "--linear=both"]
    monkeypatch.setattr(sys, "argv", argv)
    bench_train.main()
    out = capsys.readouterr().out
    assert "posexp bf16: causal attention matmul (auto: matmul; in bf16 on this CPU" in out
    assert "posexp fp32: causal attention sdpa (auto: sdpa for fp32)" in out
    assert "posexp fp32: linear layers onednn (auto: onednn; in fp32 on this CPU" in out
    assert "posexp bf16: linear layers torch (auto: torch for bf16 on cpu)" in out
    rows = [line.split("  ")[0] for line in out.splitlines() if line.startswith("posexp rope")]
    assert rows == [
        "posexp rope, fp32 (onednn)",
        "posexp rope, fp32 (torch)",
        "posexp rope, bf16 (matmul)",
        "posexp rope, bf16 (sdpa)",
    ]
    # MFU's fp32 rate is the faster kernel's (oneDNN here), torch's BLAS rate said beside it.
    (line,) = [line for line in out.splitlines() if line.startswith("matmul rate")]
    fp32 = float(line.split("fp32 ")[1].split(" GFLOP/s")[0].replace(",", ""))
    blas = float(line.split("(torch's BLAS: ")[1].split(")")[0].replace(",", ""))
    assert fp32 == pytest.approx(2 * blas, rel=0.01, abs=0.11)
