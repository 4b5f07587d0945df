"""Attention with its log-sum-exp, and extra logits merged into it (posexp/kernels/lse_attention.py)."""

import math

import pytest
import torch

from posexp.kernels import lse_attention


def tensors(T: int, d: int = 8, heads: int = 2, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, heads, T, d, generator=g, dtype=dtype) for _ in range(3)]


def written_out(q, k, v, mask, causal):
    """The textbook formula in float64: scores, logsumexp, softmax times values."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask.double()
    if causal:
        T = q.shape[2]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v, scores.logsumexp(-1)


def band_mask(T: int, window: int) -> torch.Tensor:
    i = torch.arange(T)
    distance = i[:, None] - i[None, :]
    return torch.zeros(T, T).masked_fill((distance < 0) | (distance >= window), float("-inf"))


@pytest.mark.parametrize("T", [5, 300, 600])  # beyond the CPU kernel's tiles of queries and keys
@pytest.mark.parametrize("masked", [False, True])
def test_output_and_lse_equal_the_written_out_formula(T, masked):
    q, k, v = tensors(T, seed=T)
    mask = band_mask(T, 37) if masked else None
    out, lse = lse_attention.attention_lse(q, k, v, mask, causal=not masked)
    want_out, want_lse = written_out(q, k, v, mask, causal=not masked)
    assert torch.allclose(out.double(), want_out, atol=1e-5)
    assert torch.allclose(lse.double(), want_lse, atol=1e-5)


@pytest.mark.parametrize("trained_mask", [False, True])
@pytest.mark.parametrize("use_lse", [False, True])
def test_gradients_through_output_and_lse_equal_autograd_of_the_formula(trained_mask, use_lse):
    # trained_mask: a mask that needs a gradient (a trained bias) takes the written-out kernel.
    T = 300
    q, k, v = tensors(T, seed=1)
    mask = band_mask(T, 50).requires_grad_(trained_mask)
    g_out, g_lse = tensors(T, seed=2)[0], torch.randn(2, 2, T)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    assert lse_attention.flash_runs(ours[0], mask, 0.0) is not trained_mask
    out, lse = lse_attention.attention_lse(*ours, mask)
    loss = (out * g_out).sum() + ((lse * g_lse).sum() if use_lse else 0.0)
    loss.backward()
    ref = [t.double().clone().requires_grad_() for t in (q, k, v)]
    want_out, want_lse = written_out(*ref, mask.detach(), False)
    want = (want_out * g_out.double()).sum()
    if use_lse:
        want = want + (want_lse * g_lse.double()).sum()
    want.backward()
    for a, b in zip(ours, ref, strict=True):
        assert torch.allclose(a.grad.double(), b.grad, atol=2e-5)


def test_flash_runs_only_where_the_cpu_kernel_can():
    q = torch.zeros(1, 1, 2, 4)
    assert lse_attention.flash_runs(q, None, 0.0)
    assert not lse_attention.flash_runs(q, None, 0.1)
    assert not lse_attention.flash_runs(q.double(), None, 0.0)
    assert not lse_attention.flash_runs(q, torch.zeros(2, 2, requires_grad=True), 0.0)


def test_a_sink_logit_scales_by_a_sigmoid_worked_numbers():
    # One key of logit 1 and a sink of logit 0: weight e / (e + 1) = σ(1) = 0.7311.
    out = torch.tensor([2.0, -4.0]).view(1, 1, 1, 2)
    got = lse_attention.merge_extra_logits(out, torch.ones(1, 1, 1), sink_logit=torch.zeros(1))
    assert torch.allclose(got.flatten(), torch.tensor([2.0, -4.0]) * 0.7310586, atol=1e-6)


@pytest.mark.parametrize("with_sink", [False, True])
def test_merging_extra_keys_equals_one_softmax_over_all_logits(with_sink):
    g = torch.Generator().manual_seed(5)
    B, H, T, K, n, d = 2, 3, 4, 6, 2, 5
    own = torch.randn(B, H, T, K, generator=g)
    extra = torch.randn(B, H, T, n, generator=g)
    extra[0, 1, 2, 0] = float("-inf")  # a hidden extra key
    v_own, v_extra = torch.randn(B, H, K, d, generator=g), torch.randn(B, H, n, d, generator=g)
    sink = torch.randn(H, generator=g) if with_sink else None
    out = own.softmax(-1) @ v_own
    got = lse_attention.merge_extra_logits(out, own.logsumexp(-1), extra, v_extra, sink)
    every = [own, extra] + ([sink.view(1, H, 1, 1).expand(B, H, T, 1)] if with_sink else [])
    weights = torch.cat(every, dim=-1).softmax(-1)
    want = weights[..., :K] @ v_own + weights[..., K : K + n] @ v_extra
    assert torch.allclose(got, want, atol=1e-6)
