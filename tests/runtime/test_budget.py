"""The step estimate before training: closed forms, and what it refuses or names."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from posexp.errors import PosexpError
from posexp.runtime.budget import (
    StepEstimate,
    check_step,
    estimate_step,
    flops_per_token,
    matmul_rate,
    step_memory,
)


@dataclass
class Shape:
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 256


@dataclass
class Train:
    batch_size: int = 8
    seq_len: int = 1024
    eval_tokens: int = 4096
    max_steps: int = 100
    eval_interval: int = 50


def test_flops_are_palms_count():
    # 6N per token for the matmuls with weights, 12 L d T for attention's two products.
    assert flops_per_token(1000, 2, 64, 128) == 6 * 1000 + 12 * 2 * 64 * 128


def test_memory_adds_state_activations_scores_and_logits():
    m, params, rows, t = Shape(), 1000, 2, 16
    tokens = rows * t
    base = 16 * params + 4 * 16 * 64 * 2 * tokens + 12 * tokens * 256
    assert step_memory(m, params, rows, t, keeps_scores=False) == base
    assert step_memory(m, params, rows, t, keeps_scores=True) == base + 4 * rows * 4 * t * t * 2


def test_a_step_over_the_free_memory_is_refused_in_one_line():
    est = StepEstimate(
        memory_bytes=3 * 2**30, step_flops=1.0, eval_flops=1.0, rate=1e9, available=2**30
    )
    with pytest.raises(
        PosexpError,
        match=r"^one training step needs at least 3.0 GiB "
        r"\(train.batch_size=8, train.seq_len=1024\) and cpu has "
        r"1.0 GiB free",
    ):
        check_step(est, Train(), torch.device("cpu"))


def test_a_step_near_the_limit_or_slow_is_named_with_the_estimate():
    est = StepEstimate(
        memory_bytes=int(0.9 * 2**30), step_flops=2e12, eval_flops=1e12, rate=1e10, available=2**30
    )
    memory, slow = check_step(est, Train(), torch.device("cpu"))
    assert "close to running out" in memory
    # 200 s a step, 100 s an evaluation; 100 steps and 3 evaluations: 20,300 s = 5.6 h.
    assert slow.startswith("slow: one step takes at least 3 min and one evaluation 100 s")
    assert slow.endswith("100 steps: at least 5.6 h")


def test_a_fast_step_that_fits_says_nothing():
    est = estimate_step(Shape(), 10_000, 2, 64, 512, False, rate=1e10, available=2**34)
    assert check_step(est, Train(), torch.device("cpu")) == []
    assert est.step_seconds == pytest.approx(est.step_flops / 1e10)


def test_the_matmul_rate_is_measured_once_per_machine_and_width(tmp_path):
    first = matmul_rate(torch.device("cpu"), "fp32", 32, tmp_path)
    (cached,) = (tmp_path / "precision").glob("matmul_rate_*.json")
    assert first > 0
    cached.write_text(cached.read_text().replace(str(first), "12345.0"))
    assert matmul_rate(torch.device("cpu"), "fp32", 32, tmp_path) == 12345.0  # read back
    cached.write_text("{")  # damaged: measured again
    assert matmul_rate(torch.device("cpu"), "fp32", 32, tmp_path) != 12345.0


def test_the_matmul_rate_is_the_runs_linear_kernels(tmp_path, monkeypatch):
    from posexp.kernels import onednn_linear

    kernels = []
    real = onednn_linear.linear
    monkeypatch.setattr(
        onednn_linear, "linear", lambda x, w, kernel="torch": kernels.append(kernel) or real(x, w)
    )
    matmul_rate(torch.device("cpu"), "fp32", 32, tmp_path, "onednn")
    assert set(kernels) == {"onednn"}
    matmul_rate(torch.device("cpu"), "fp32", 32, tmp_path)  # cached apart: measured again
    assert set(kernels) == {"onednn", "torch"}
    assert len(list((tmp_path / "precision").glob("matmul_rate_*.json"))) == 2


def test_the_bf16_matmul_kernel_s_weights_count_at_two_bytes():
    class Shape:
        d_model, n_layers, n_heads, vocab_size = 64, 2, 4, 260

    m, params, rows, t = Shape(), 10_000, 4, 128
    base = step_memory(m, params, rows, t, keeps_scores=False)
    kept = step_memory(m, params, rows, t, keeps_scores=True, score_bytes=2)
    assert kept - base == 2 * rows * 4 * t * t * 2


@pytest.mark.parametrize(
    ("pe", "kernel", "precision", "expected"),
    [
        ("rope", "sdpa", "bf16", (False, 4)),
        ("rope", "matmul", "bf16", (True, 2)),
        ("rope", "matmul", "fp32", (False, 4)),  # the kernel runs in 16-bit only
        ("alibi", "matmul", "bf16", (True, 4)),
    ],
)
def test_a_run_s_estimate_counts_the_attention_weights_its_kernel_keeps(
    monkeypatch, tmp_path, pe, kernel, precision, expected
):
    from posexp.model import GPT, ModelConfig
    from posexp.runtime import budget
    from tests.helpers import TINY, run_config

    seen = {}

    def estimate(*args, keeps_scores, score_bytes, **kwargs):
        seen["scores"] = (keeps_scores, score_bytes)
        return budget.StepEstimate(1, 1.0, 1.0, None, None)

    monkeypatch.setattr(budget, "estimate_step", estimate)
    monkeypatch.setattr(budget, "matmul_rate", lambda *a: 1e12)
    cfg = run_config(*TINY, f"pe={pe}", f"cache_dir={tmp_path}")
    model = GPT(ModelConfig(vocab_size=50, n_heads=2, d_model=64, pe=pe, causal_kernel=kernel))
    budget.check_budget(cfg, model.cfg, model, torch.device("cpu"), precision, None)
    assert seen["scores"] == expected
