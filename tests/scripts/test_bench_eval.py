"""scripts/bench_eval.py at toy size: a bias PE's variant on each backend runs and is measured
through the kernel it names."""

from __future__ import annotations

import pytest

from posexp.kernels import cpp_bias
from scripts import bench_eval


@pytest.fixture
def bench():
    """scripts/bench_eval.py."""
    return bench_eval


def test_a_cpp_variant_runs_on_posexps_kernel_and_an_sdpa_one_does_not(bench, monkeypatch):
    calls = []
    real = cpp_bias.causal_attention
    monkeypatch.setattr(cpp_bias, "causal_attention", lambda *a: calls.append(1) or real(*a))
    row = bench.child("fire:cpp", 200, "tiny", 4, "cpu", 1, 100, "fp32")
    assert row["pe"] == "fire:cpp" and row["length"] == 200 and row["tok_s"] > 0
    assert calls  # 2 layers, every pass
    calls.clear()
    assert bench.child("fire:sdpa", 200, "tiny", 4, "cpu", 1, 100, "fp32")["tok_s"] > 0
    assert not calls


def test_an_unknown_backend_is_refused(bench):
    with pytest.raises(Exception, match="unknown attention backend 'fast'"):
        bench.child("alibi:fast", 64, "tiny", 4, "cpu", 1, 64, "fp32")
