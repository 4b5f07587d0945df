"""Sliding windows, sinks and the learned sink logit (posexp/model/attention.py, ``windowed``)."""

import math

import pytest
import torch
import torch.nn.functional as F

from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.model import attention as attention_module
from posexp.model.attention import QUERY_CHUNK, AttentionCall, attend
from posexp.pe import PEContext, build_pe


def pe_of(name: str, heads: int = 2, head_dim: int = 8):
    return build_pe(name, PEContext(heads * head_dim, heads, head_dim, 64))


def qkv(T: int, heads: int = 2, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, heads, T, d, generator=g) for _ in range(3)]


def reference(q, k, v, window, sinks, bias=None, sink_logit=None):
    """Row by row: the visible keys written out as a Python set, then a plain softmax."""
    B, H, T, d = q.shape
    out = torch.zeros_like(q)
    for i in range(T):
        keys = [j for j in range(i + 1) if window is None or i - j < window or j < sinks]
        z = torch.einsum("bhd,bhkd->bhk", q[:, :, i], k[:, :, keys]) / math.sqrt(d)
        if bias is not None:
            z = z + bias[None, :, i, keys]  # (H, T, T) per head
        if sink_logit is not None:
            z = torch.cat([z, sink_logit.view(1, H, 1).expand(B, H, 1)], dim=-1)
            w = z.softmax(-1)[..., :-1]
        else:
            w = z.softmax(-1)
        out[:, :, i] = torch.einsum("bhk,bhkd->bhd", w, v[:, :, keys])
    return out


def call(q, k, v, pe, **kw):
    pos = torch.arange(q.shape[2])
    return AttentionCall(q, k, v, pos, pos, pe, **kw)


@pytest.mark.parametrize("pe_name", ["none", "rope", "alibi"])
@pytest.mark.parametrize("T", [12, 2 * QUERY_CHUNK + 7])
def test_a_window_at_least_the_length_equals_full_attention_exactly(pe_name, T):
    q, k, v = qkv(T)
    pe = pe_of(pe_name)
    full, _ = attend(call(q, k, v, pe))
    for window in (T, T + 5):
        windowed, _ = attend(call(q, k, v, pe, window=window, sinks=3))
        assert torch.equal(windowed, full)


@pytest.mark.parametrize("pe_name", ["none", "alibi"])
@pytest.mark.parametrize(("T", "window", "sinks"), [(6, 3, 0), (11, 4, 2), (300, 40, 4)])
def test_window_and_sinks_match_a_direct_masked_softmax(pe_name, T, window, sinks):
    q, k, v = qkv(T, seed=T)
    pe = pe_of(pe_name)
    pos = torch.arange(T)
    bias = pe.bias(pos, pos, torch.float32).expand(2, T, T) if pe.has_bias else None
    want = reference(q, k, v, window, sinks, bias)
    got, _ = attend(call(q, k, v, pe, window=window, sinks=sinks))
    assert torch.allclose(got, want, atol=1e-5)
    got_w, weights = attend(call(q, k, v, pe, window=window, sinks=sinks, need_weights=True))
    assert torch.allclose(got_w, want, atol=1e-5)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, T), atol=1e-5)


def test_the_worked_mask_l6_w3():
    # Row 5 sees {3, 4, 5}, row 1 sees {0, 1}.
    pos = torch.arange(6)
    mask = attention_module.window_mask(pos, pos, 3, 0)
    assert mask[5].nonzero().flatten().tolist() == [3, 4, 5]
    assert mask[1].nonzero().flatten().tolist() == [0, 1]
    with_sink = attention_module.window_mask(pos, pos, 3, 1)
    assert with_sink[5].nonzero().flatten().tolist() == [0, 3, 4, 5]


def test_a_window_of_one_returns_each_tokens_own_value():
    q, k, v = qkv(9)
    got, _ = attend(call(q, k, v, pe_of("rope"), window=1))
    assert torch.allclose(got, v, atol=1e-6)


def test_sink_logit_with_one_key_scales_its_value_by_a_sigmoid():
    # One key with logit z: weight e^z / (e^z + e^s) = σ(z - s).
    q = torch.tensor([[[[2.0, 0.0]], [[1.0, 1.0]]]])  # (1, 2 heads, 1, d=2)
    k = torch.tensor([[[[1.0, 0.0]], [[1.0, -1.0]]]])
    v = torch.tensor([[[[3.0, -1.0]], [[0.5, 2.0]]]])
    s = torch.tensor([0.7, -1.2])
    got, _ = attend(call(q, k, v, pe_of("none", head_dim=2), sink_logit=s))
    z = torch.tensor([2.0 / math.sqrt(2), 0.0])
    scale = torch.exp(z) / (torch.exp(z) + torch.exp(s))
    assert torch.allclose(got[0, :, 0], v[0, :, 0] * scale[:, None], atol=1e-6)


def test_sink_logit_equals_softmax_attention_times_sigmoid_of_lse_minus_sink():
    T = 10
    q, k, v = qkv(T, seed=3)
    s = torch.tensor([0.5, -0.3])
    got, _ = attend(call(q, k, v, pe_of("none"), sink_logit=s))
    assert torch.allclose(got, reference(q, k, v, None, 0, sink_logit=s), atol=1e-5)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(
        ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")
    )
    plain = scores.softmax(-1) @ v
    lse = scores.logsumexp(-1, keepdim=True)
    assert torch.allclose(got, plain * torch.sigmoid(lse - s.view(1, 2, 1, 1)), atol=1e-5)
    # z = [0, 0], s = 0: weights 1/3 each.
    zero = torch.zeros(1, 1, 2, 2)
    _, w = attend(
        AttentionCall(
            zero,
            zero,
            zero,
            torch.tensor([1, 1]),
            torch.tensor([0, 1]),
            pe_of("none", 1, 2),
            need_weights=True,
            sink_logit=torch.zeros(1),
        )
    )
    assert torch.allclose(w[0, 0, 0], torch.tensor([1 / 3, 1 / 3]))


def test_each_block_holds_only_its_band_of_keys(monkeypatch):
    # O(L·W): a block of queries never sees more than its sinks and window + block - 1 keys.
    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append(k.shape[2])
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", spy)
    T, window, sinks = 4 * QUERY_CHUNK, 16, 2
    q, k, v = qkv(T)
    attend(call(q, k, v, pe_of("rope"), window=window, sinks=sinks))
    assert len(seen) == 4 and max(seen) <= sinks + window + QUERY_CHUNK - 1


def model(**kw):
    torch.manual_seed(0)
    return GPT(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, **kw)).eval()


def test_a_model_with_a_window_wider_than_its_input_gives_full_attentions_logits():
    idx = torch.randint(0, 40, (2, 30))
    assert torch.equal(model(window=30)(idx)["logits"], model()(idx)["logits"])
    assert not torch.allclose(model(window=4)(idx)["logits"], model()(idx)["logits"])


@pytest.mark.parametrize("kw", [dict(window=5, sinks=2), dict(window=5, sink_logit=True)])
def test_kv_cache_decoding_with_a_window_equals_the_full_forward(kw):
    m = model(**kw)
    if kw.get("sink_logit"):
        with torch.no_grad():
            for block in m.blocks:
                block.attn.sink_logit.copy_(torch.tensor([0.3, -0.5, 1.0, 0.0]))
    idx = torch.randint(0, 40, (2, 20))
    full = m(idx)["logits"]
    cache = m.new_cache()
    steps = [m(idx[:, :6], cache=cache)["logits"]]
    steps += [m(idx[:, t : t + 1], cache=cache)["logits"] for t in range(6, 20)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


def test_the_sink_logit_is_a_trained_parameter_per_head():
    m = model(window=4, sink_logit=True).train()
    idx = torch.randint(0, 40, (2, 12))
    m(idx, targets=idx)["loss"].backward()
    sink = m.blocks[0].attn.sink_logit
    assert sink.shape == (4,) and sink.grad is not None and sink.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(window=0), "window must be a positive integer"),
        (dict(window=4, sinks=-1), "sinks must be an integer >= 0"),
        (dict(window=4, pe="fox"), "cannot apply to pe=fox"),
    ],
)
def test_bad_window_settings_are_one_line(kw, message):
    with pytest.raises(PosexpError, match=message):
        GPT(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, **kw))
