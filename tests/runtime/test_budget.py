"""The step estimate before training: closed forms, and what it refuses or names."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from posexp.errors import PosexpError
from posexp.kernels.choice import KernelChoice
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


@pytest.fixture
def rates(monkeypatch):
    """Replace the matmul timing with a new rate at each call (1, 2, ... GFLOP/s); the calls."""
    from posexp.runtime import budget

    calls = []
    monkeypatch.setattr(budget, "_measure", lambda *a: calls.append(a) or 1e9 * len(calls))
    return calls


def test_the_matmul_rate_is_measured_per_cpu_and_gpu_model(tmp_path, monkeypatch, rates):
    import hashlib

    from posexp.runtime import precision

    # A rate cached before (key v1, every CPU named "cpu") is simply not found, nor warned of.
    old = f"v1|cpu|{torch.__version__}|{torch.get_num_threads()}|fp32|32"
    digest = hashlib.sha256(old.encode()).hexdigest()[:16]
    old_file = tmp_path / "precision" / f"matmul_rate_{digest}.json"
    old_file.parent.mkdir()
    old_file.write_text(json.dumps({"key": old, "rate": 12345.0}))
    cpu = torch.device("cpu")
    seen = []
    for family in ("25", "26", "25"):  # one marketing name, two CPU families
        fields = {"model name": "AMD EPYC", "cpu family": family, "model": "2"}
        monkeypatch.setattr(precision, "_cpuinfo", lambda fields=fields: fields)
        seen.append(matmul_rate(cpu, "fp32", 32, tmp_path))
    assert seen == [1e9, 2e9, 1e9]  # each family measured once, then read back
    seen = []
    for gpu in ("NVIDIA H100", "NVIDIA A100", "NVIDIA H100"):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device, gpu=gpu: gpu)
        seen.append(matmul_rate(torch.device("cuda"), "bf16", 32, tmp_path))
    assert seen == [3e9, 4e9, 3e9]
    assert json.loads(old_file.read_text())["rate"] == 12345.0  # left as it was


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda record: "{", "not JSON: "),
        (
            lambda record: json.dumps(record | {"rate": -1.0}),
            "expected a key and a positive, finite rate",
        ),
    ],
)
def test_a_damaged_matmul_rate_cache_is_said_in_one_line_and_measured_again(
    tmp_path, caplog, rates, damage, reason
):
    cpu = torch.device("cpu")
    assert matmul_rate(cpu, "fp32", 32, tmp_path) == 1e9
    (entry,) = (tmp_path / "precision").glob("matmul_rate_*.json")
    damaged = damage(json.loads(entry.read_text()))
    entry.write_text(damaged)
    with caplog.at_level("WARNING", logger="posexp"):
        assert matmul_rate(cpu, "fp32", 32, tmp_path) == 2e9
        assert matmul_rate(cpu, "fp32", 32, tmp_path) == 2e9  # measured again once, then read
    said = [r.getMessage() for r in caplog.records if r.name == "posexp"]
    assert len(said) == 1 and len(rates) == 2
    assert said[0].startswith(f"{str(entry)!r} is unreadable ({reason}")
    assert said[0].endswith(f"; measuring again, its bytes kept in {entry}.bak")
    assert "\n" not in said[0]
    assert entry.with_name(entry.name + ".bak").read_text() == damaged


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
    model = GPT(
        ModelConfig(vocab_size=50, n_heads=2, d_model=64, pe=pe), KernelChoice(causal=kernel)
    )
    budget.check_budget(cfg, model.cfg, model, torch.device("cpu"), precision, None)
    assert seen["scores"] == expected
