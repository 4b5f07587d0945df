"""The matmul kernel for causal attention: the written-out softmax's numbers and gradients, where
it applies, and a measurement that leaves the run's random stream alone."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posexp.kernels import matmul_attention
from posexp.kernels.choice import KernelChoice
from posexp.kernels.matmul_attention import MAX_WEIGHTS, applies, causal_attention


def written_out(q, k, v, bias=0.0):
    """softmax(QKᵀ/√d + bias) V with key j > query i masked out, term by term."""
    L = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    hidden = torch.arange(L)[None, :] > torch.arange(L)[:, None]
    return scores.masked_fill(hidden, float("-inf")).softmax(-1) @ v


def leaves(dtype, shape=(2, 3, 37, 8)):
    torch.manual_seed(0)
    return [torch.randn(shape, dtype=torch.float64).to(dtype).requires_grad_() for _ in range(3)]


@pytest.mark.parametrize("bias_shape", [None, (3, 37, 37), (2, 3, 37, 37)])
def test_values_and_gradients_equal_the_written_out_softmax(bias_shape):
    q, k, v = leaves(torch.float64)
    inputs = [q, k, v]
    bias = None
    if bias_shape is not None:  # a learned position bias (T5, FIRE) gets its gradient too
        bias = torch.randn(bias_shape, dtype=torch.float64, requires_grad=True)
        inputs.append(bias)
    got = causal_attention(q, k, v, bias=bias)
    want = written_out(q, k, v, 0.0 if bias is None else bias)
    assert torch.allclose(got, want, atol=1e-12)
    cotangent = torch.randn_like(want)
    for a, b in zip(
        torch.autograd.grad((got * cotangent).sum(), inputs),
        torch.autograd.grad((want * cotangent).sum(), inputs),
        strict=True,
    ):
        assert a.abs().max() > 0 and torch.allclose(a, b, atol=1e-10)


def test_in_bf16_it_differs_from_fp32_sdpa_by_bf16_rounding_only():
    q, k, v = leaves(torch.bfloat16, (4, 4, 256, 32))
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    ours = causal_attention(q, k, v).double()
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True).double()
    # Both bf16 kernels land within a few bf16 steps of the exact value, and of each other.
    assert (ours - exact).abs().max() < 0.05 and (sdpa - exact).abs().max() < 0.05
    assert (ours - exact).abs().mean() < 4 * (sdpa - exact).abs().mean() + 1e-3


def test_attention_dropout_drops_weights_as_f_dropout_does():
    q, k, v = leaves(torch.float64)
    torch.manual_seed(5)
    got = causal_attention(q, k, v, dropout=0.5)
    torch.manual_seed(5)
    L = q.shape[2]
    hidden = torch.arange(L)[None, :] > torch.arange(L)[:, None]
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(hidden, -math.inf)
    want = F.dropout(scores.softmax(-1).reshape(-1, L, L), 0.5).view_as(scores) @ v
    assert torch.allclose(got, want) and not torch.allclose(got, written_out(q, k, v))


def test_it_applies_to_16_bit_training_within_its_memory_bound():
    def q(dtype, batch=32, length=256):
        return torch.empty(batch, 4, length, 32, dtype=dtype, device="meta")

    assert applies(q(torch.bfloat16)) and applies(q(torch.float16))
    assert not applies(q(torch.float32))
    with torch.no_grad():  # evaluation keeps SDPA
        assert not applies(q(torch.bfloat16))
    side = math.isqrt(MAX_WEIGHTS // 4)
    assert applies(q(torch.bfloat16, 1, side)) and not applies(q(torch.bfloat16, 1, side + 1))


def test_the_measurement_times_both_kernels_and_draws_no_random_numbers():
    torch.manual_seed(11)
    before = torch.get_rng_state()
    speedup = matmul_attention.measure_speedup(2, 2, 64, 16, torch.device("cpu"), reps=1)
    assert speedup > 0 and math.isfinite(speedup)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("pe", ["rope", "alibi", "t5"])
@pytest.mark.parametrize("kernel", ["matmul", "sdpa"])
def test_a_bf16_training_step_takes_the_chosen_kernel_and_agrees_with_sdpa(monkeypatch, kernel, pe):
    from posexp.model import GPT, ModelConfig
    from tests.helpers import bf16_step_matches_sdpa

    torch.manual_seed(0)
    cfg = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=2, train_length=64, pe=pe)
    x = torch.randint(0, 50, (4, 64))
    runs = bf16_step_matches_sdpa(monkeypatch, cfg, x, kernel)
    assert runs == (2 if kernel == "matmul" else 0)  # one per layer
    calls = []
    real = matmul_attention.causal_attention
    monkeypatch.setattr(
        matmul_attention, "causal_attention", lambda *a: calls.append(1) or real(*a)
    )
    chosen = GPT(ModelConfig(**cfg), KernelChoice(causal=kernel))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        chosen(x)  # evaluation: SDPA
    chosen(x)  # fp32: SDPA
    assert calls == []


def test_irope_s_chunked_layers_take_the_matmul_kernel_chunk_by_chunk(monkeypatch):
    from tests.helpers import bf16_step_matches_sdpa

    torch.manual_seed(1)
    params = {"layers": ["rope", "rope", "rope", "none"], "chunk": 16, "temperature": 0.1}
    cfg = dict(vocab_size=50, d_model=32, n_layers=4, n_heads=2, pe="layered", pe_params=params)
    runs = bf16_step_matches_sdpa(monkeypatch, cfg, torch.randint(0, 50, (2, 64)))
    assert runs == 3 * 4 + 1  # three chunked layers of four chunks each, one whole layer


def test_an_unknown_kernel_is_a_one_line_error():
    from posexp.errors import PosexpError

    with pytest.raises(PosexpError, match="unknown causal kernel 'fast'; allowed: matmul, sdpa"):
        KernelChoice(causal="fast")
