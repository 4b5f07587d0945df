"""scripts/bench_attention.py at toy size: every kernel row is timed in both precisions, and
the chunked matmul kernel computes the same attention as SDPA."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.helpers import load_script


def test_every_kernel_is_timed_in_each_precision(capsys):
    bench = load_script("bench_attention")
    argv = ["--batch", "4", "--heads", "2", "--seq-len", "16", "--head-dim", "8"]
    results = bench.main(
        [*argv, "--chunks", "1,2", "--blocked", "2:3", "--rounds", "2", "--threads", "1"]
    )
    assert set(results) == {"fp32", "bf16"}
    for ms in results.values():
        assert set(ms) == {"sdpa", "matmul (posexp)", "matmul, 2 chunks", "hand-written, 2h x 3q"}
        assert all(value > 0 for value in ms.values())
    assert capsys.readouterr().out.count("x1.00 SDPA") >= 2  # SDPA's own row, per precision


def test_the_chunked_kernel_equals_sdpa():
    bench = load_script("bench_attention")
    q, k, v = torch.randn(3, 6, 2, 10, 8, dtype=torch.float64).unbind()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(bench.chunked(3)(q, k, v), expected)


def test_the_hand_written_kernel_and_its_backward_equal_sdpa():
    bench = load_script("bench_attention")
    q, k, v = (torch.randn(2, 3, 10, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    probe = torch.randn(2, 3, 10, 8, dtype=torch.float64)
    for heads, blocks in ((4, 3), (6, 1)):  # uneven groups and blocks; one block: the square
        got = bench.blocked(heads, blocks)(q, k, v)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(got, want)
        grads = torch.autograd.grad((got * probe).sum(), (q, k, v))
        expected = torch.autograd.grad((want * probe).sum(), (q, k, v))
        for a, b in zip(grads, expected, strict=True):
            torch.testing.assert_close(a, b)
