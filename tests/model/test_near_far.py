"""Attention split into a near band and a far flash call: the same numbers as the pairwise
softmax, within memory O(T x (chunk + w))."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.model import attention, near_far
from posexp.model.attention import AttentionCall, attend, explicit_attention
from posexp.pe import PEContext, build_pe
from posexp.pe.t5 import relative_buckets


def t5(max_distance: int, heads: int = 4, head_dim: int = 16):
    pe = build_pe(
        "t5",
        PEContext(d_model=heads * head_dim, n_heads=heads, head_dim=head_dim, train_length=64),
        max_distance=max_distance,
    )
    with torch.no_grad():
        pe.table.normal_()  # a trained-looking table: every bucket differs
    return pe


@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 20), (64, 1000)])
def test_t5_distances_from_max_distance_on_share_the_last_bucket(num_buckets, max_distance):
    d = torch.arange(max_distance, 20 * max_distance)
    assert (relative_buckets(d, num_buckets, max_distance) == num_buckets - 1).all()
    # ...and the one before it is not always there, so w cannot simply be smaller.
    assert relative_buckets(torch.tensor([num_buckets // 2]), num_buckets, max_distance) < (
        num_buckets - 1
    )


@pytest.mark.parametrize("max_distance", [20, 128, 200])
@pytest.mark.parametrize("T", [150, 300])  # 150 <= 200: a band only; 300 crosses chunks
def test_t5_split_equals_the_explicit_softmax(max_distance, T):
    torch.manual_seed(0)
    pe = t5(max_distance)
    q, k, v = (torch.randn(2, 4, T, 16) for _ in range(3))
    pos = torch.arange(T)
    with torch.no_grad():
        assert near_far.applies(q, k, v, pos, pos)
        got, _ = attend(AttentionCall(q, k, v, pos, pos, pe))
        expected, _ = explicit_attention(q, k, v, pos, pos, pe)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_t5_split_in_bf16_is_as_close_as_bf16_sdpa():
    torch.manual_seed(1)
    pe = t5(32)
    q, k, v = (torch.randn(1, 4, 400, 16) for _ in range(3))
    pos = torch.arange(400)
    with torch.no_grad():
        exact, _ = explicit_attention(q, k, v, pos, pos, pe)
        got, _ = attend(AttentionCall(q.bfloat16(), k.bfloat16(), v.bfloat16(), pos, pos, pe))
        bias = pe.bias(pos, pos, torch.bfloat16).masked_fill(pos > pos[:, None], -math.inf)
        sdpa = torch.nn.functional.scaled_dot_product_attention(
            q.bfloat16(), k.bfloat16(), v.bfloat16(), attn_mask=bias
        )
    assert got.dtype == torch.bfloat16
    assert (got.float() - exact).abs().max() <= 2 * (sdpa.float() - exact).abs().max()


def test_a_far_bias_of_minus_infinity_leaves_a_sliding_window():
    torch.manual_seed(2)
    T, w = 260, 50
    q, k, v = (torch.randn(1, 2, T, 8) for _ in range(3))
    s = q / math.sqrt(8)
    got = near_far.attention(s, k, s, k, v, w, far_bias=torch.full((2,), -1e30))
    i = torch.arange(T)
    visible = (i[:, None] - i[None, :] >= 0) & (i[:, None] - i[None, :] < w)
    scores = (s @ k.transpose(-1, -2)).masked_fill(~visible, -math.inf)
    torch.testing.assert_close(got, scores.softmax(-1) @ v, rtol=1e-5, atol=1e-5)


def test_no_call_holds_more_than_a_chunk_and_its_window(monkeypatch):
    T, w = 1000, 64
    calls = []
    real = near_far.flash_with_lse

    def spy(q, k, v, is_causal=False, mask=None):
        calls.append((q.shape[2], k.shape[2], is_causal, None if mask is None else mask.numel()))
        return real(q, k, v, is_causal, mask)

    monkeypatch.setattr(near_far, "flash_with_lse", spy)
    q, k, v = (torch.randn(1, 2, T, 8) for _ in range(3))
    near_far.attention(q, k, q, k, v, w)
    band = [c for c in calls if not c[2]]
    far = [c for c in calls if c[2]]
    assert far == [(T - w, T - w, True, None)]  # the far part: one causal call, no mask
    chunk = max(near_far.CHUNK, w)
    assert sum(c[0] for c in band) == T
    assert all(c[1] <= chunk + w - 1 and c[3] <= chunk * (chunk + w - 1) for c in band)


def test_it_applies_only_without_gradients_to_consecutive_shared_positions():
    q, k, v = (torch.randn(1, 2, 10, 8) for _ in range(3))
    pos = torch.arange(10)
    assert near_far.applies(q, k, v, pos, pos)
    assert near_far.applies(q, k, v, pos + 5, pos + 5)
    assert not near_far.applies(q, k, v, pos, pos + 1)
    assert not near_far.applies(q, k, v, pos * 2, pos * 2)
    assert not near_far.applies(q, k, v, pos.expand(1, 10), pos.expand(1, 10))  # per-row
    assert not near_far.applies(q.requires_grad_(), k, v, pos, pos)
    with torch.no_grad():
        assert near_far.applies(q, k, v, pos, pos)


@pytest.mark.parametrize("method", ["self_extend", "rerope"])
def test_the_training_free_methods_take_the_split_without_gradients(method, monkeypatch):
    from posexp.extension import ExtensionConfig

    ext = ExtensionConfig(method, 4.0, 64, {})
    pe = build_pe("rope", PEContext(32, 2, 16, 64, ext))
    plan = ext.attention_plan()
    taken = []
    real = near_far.attention
    monkeypatch.setattr(near_far, "attention", lambda *a, **kw: taken.append(1) or real(*a, **kw))
    q, k, v = (torch.randn(1, 2, 300, 16, requires_grad=True) for _ in range(3))
    pos = torch.arange(300)
    with_grad, _ = attention.remapped_attention(q, k, v, pos, pos, plan, pe.rotate_at)
    assert not taken  # training keeps the chunked path (autograd through one softmax)
    with torch.no_grad():
        split, _ = attention.remapped_attention(q, k, v, pos, pos, plan, pe.rotate_at)
    assert taken
    torch.testing.assert_close(split, with_grad.detach(), rtol=1e-5, atol=1e-5)


def test_a_t5_table_that_needs_its_gradient_keeps_the_chunked_path():
    pe = t5(20)
    q, k, v = (torch.randn(1, 4, 60, 16) for _ in range(3))
    pos = torch.arange(60)
    y, _ = attend(AttentionCall(q, k, v, pos, pos, pe))
    y.sum().backward()  # the table is trained: its gradient flows through the explicit bias
    assert pe.table.grad is not None and pe.table.grad.abs().sum() > 0
