"""Sliding windows, sinks and the learned sink logit (posexp/model/attention.py, ``windowed``)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.model import attention as attention_module
from posexp.model import gpt as gpt_module
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
# 4 blocks of 128 and a partial one: several blocks share one shape of mask.
@pytest.mark.parametrize(
    ("T", "window", "sinks"), [(6, 3, 0), (11, 4, 2), (300, 40, 4), (4 * QUERY_CHUNK + 7, 40, 4)]
)
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


class LargestTensor(TorchDispatchMode):
    """Records the most elements any op's output had (forward and backward alike)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def explicit(q, k, v, pe, **kw):
    """The written-out path of the same call (weights asked for: the softmax is explicit)."""
    return attend(call(q, k, v, pe, need_weights=True, **kw))[0]


WINDOWS = [(40, 0), (40, 4), (QUERY_CHUNK + 3, 2), (1, 3)]
FAST_CASES = [(None, 0, True)] + [(w, n, logit) for w, n in WINDOWS for logit in (True, False)]


@pytest.mark.parametrize("pe_name", ["rope", "alibi"])
@pytest.mark.parametrize(("window", "sinks", "with_sink_logit"), FAST_CASES)
def test_the_windowed_fast_paths_equal_the_explicit_one_forward_and_backward(
    pe_name, window, sinks, with_sink_logit
):
    T = 4 * QUERY_CHUNK + 7  # five query blocks, the last one partial
    pe = pe_of(pe_name)
    q, k, v = qkv(T, seed=11)
    s = torch.tensor([0.8, -1.5])
    g = torch.randn(2, 2, T, 8, generator=torch.Generator().manual_seed(1))
    grads = []
    for path in (attend, explicit):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, s)]
        kw = dict(window=window, sinks=sinks, sink_logit=leaves[3] if with_sink_logit else None)
        y = path(call(*leaves[:3], pe, **kw)) if path is attend else path(*leaves[:3], pe, **kw)
        if path is attend:
            y = y[0]
        (y * g).sum().backward()
        grads.append([y.detach()] + [t.grad for t in leaves[: 3 + with_sink_logit]])
    for fast, slow in zip(*grads, strict=True):
        assert torch.allclose(fast, slow, atol=2e-5), (fast - slow).abs().max()


def test_the_sink_logit_fast_path_matches_the_row_by_row_reference():
    T = QUERY_CHUNK + 9
    q, k, v = qkv(T, seed=4)
    s = torch.tensor([0.2, 1.1])
    got, _ = attend(call(q, k, v, pe_of("none"), window=20, sinks=3, sink_logit=s))
    assert torch.allclose(got, reference(q, k, v, 20, 3, sink_logit=s), atol=1e-5)


def methods_plan(name: str, **params):
    from posexp.extension.attention import AttentionSpec
    from posexp.extension.methods.lm_infinite import lm_infinite
    from posexp.extension.methods.streaming_llm import streaming_llm

    method = {"streaming_llm": streaming_llm, "lm_infinite": lm_infinite}[name]
    return method(AttentionSpec(factor=4.0, original_length=64), **params)


METHODS = [
    ("streaming_llm", dict(sinks=4, window=40)),
    ("streaming_llm", dict(sinks=0, window=QUERY_CHUNK + 5)),
    ("lm_infinite", dict(window=33, cap=50, sinks=4)),
    ("lm_infinite", dict(window=64, cap=64, sinks=2)),
]


@pytest.mark.parametrize(("name", "params"), METHODS)
def test_a_methods_declared_window_and_sinks_are_its_classes(name, params):
    plan = methods_plan(name, **params)
    window, sinks = plan.window_sinks
    pos = torch.arange(300)
    distance = pos[:, None] - pos[None, :]
    causal = distance >= 0
    want = torch.where(distance < window, 0, torch.where(pos[None, :] < sinks, 1, -1))
    assert torch.equal(plan.classes(pos, pos)[causal], want[causal])


# The layer's own window and sinks on top: none, narrower than the method's, wider, with
# more sinks than the method keeps, and a window of one.
LAYER_LOCAL = [(None, 0), (20, 2), (60, 6), (QUERY_CHUNK + 9, 0), (1, 0)]


@pytest.mark.parametrize(("name", "params"), METHODS)
@pytest.mark.parametrize("with_sink_logit", [False, True])
@pytest.mark.parametrize(("layer_window", "layer_sinks"), LAYER_LOCAL)
def test_a_window_and_sinks_method_equals_its_per_class_path(
    name, params, with_sink_logit, layer_window, layer_sinks
):
    T = 2 * QUERY_CHUNK + 7
    plan = methods_plan(name, **params)
    pe = pe_of("rope")
    q, k, v = qkv(T, seed=9)
    s = torch.tensor([0.4, -0.6]) if with_sink_logit else None
    pos = torch.arange(T)
    local = dict(window=layer_window, sinks=layer_sinks, sink_logit=s)
    got, _ = attend(AttentionCall(q, k, v, pos, pos, pe, plan, **local))
    want, _ = attention_module.classed_attention(
        q, k, v, pos, pos, plan, pe.rotate_at, local=(layer_window, layer_sinks, s)
    )
    assert torch.allclose(got, want, atol=2e-5), (got - want).abs().max()


@pytest.mark.parametrize(
    "kw",
    [
        dict(window=32, sinks=4),
        dict(window=32, sinks=4, sink_logit=torch.tensor([0.5, -0.5])),
        dict(plan=methods_plan("streaming_llm", sinks=4, window=32)),
        dict(plan=methods_plan("lm_infinite", window=32, cap=64, sinks=4)),
        dict(window=16, sinks=2, plan=methods_plan("streaming_llm", sinks=4, window=32)),
    ],
)
def test_windowed_paths_never_hold_an_l_by_l_tensor(kw):
    # O(L·W): at L = 1,536 no op (forward or backward) makes a tensor of L² elements per head
    # pair, while the largest a block needs is its queries times its sinks and band.
    T, window = 12 * QUERY_CHUNK, 32
    pe = pe_of("rope")
    leaves = [t.requires_grad_() for t in qkv(T, seed=0)]
    with LargestTensor() as seen:
        y, _ = attend(call(*leaves, pe, **kw))
        y.sum().backward()
    assert seen.largest < T * T
    assert seen.largest <= 2 * 2 * max(QUERY_CHUNK * (4 + window + QUERY_CHUNK), T * 8)


@pytest.mark.parametrize("kw", [dict(window=5, sinks=2), dict(window=7)])
def test_kv_cache_decoding_keeps_only_the_window_and_sinks(kw):
    # Token by token past 6 windows: the logits are the full forward's, and no layer holds more
    # than its sinks, the keys still in reach, and the window of evicted ones it waits for.
    m = model(**kw)
    T = 6 * kw["window"] + 3
    idx = torch.randint(0, 40, (2, T))
    full = m(idx)["logits"]
    cache = m.new_cache()
    steps, held = [], []
    for t in range(T):
        steps.append(m(idx[:, t : t + 1], cache=cache)["logits"])
        held.append(max(layer["k_len"] for layer in cache.layers))
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    bound = kw.get("sinks", 0) + 2 * kw["window"]
    assert max(held) <= bound < T
    for layer in cache.layers:
        pos = layer["pos"][: layer["pos_len"]]
        assert set(range(kw.get("sinks", 0))) <= set(pos.tolist())  # the sinks stay
        assert pos.max() == T - 1


def test_a_cache_with_per_row_positions_is_left_whole():
    cache = {"k": torch.zeros(1, 1, 9, 2), "pos": torch.arange(9)[None], "pos_len": 9}
    gpt_module.drop_unseen_keys(cache, 2, 0, 8)
    assert cache["pos_len"] == 9


@pytest.mark.parametrize("pe_name", ["rope", "alibi"])
def test_a_window_at_least_the_length_with_a_sink_logit_equals_the_full_layers_exactly(pe_name):
    T = QUERY_CHUNK + 20
    q, k, v = qkv(T, seed=8)
    s, pe = torch.tensor([0.3, -0.2]), pe_of(pe_name)
    full, _ = attend(call(q, k, v, pe, sink_logit=s))
    for window in (T, T + 1):
        windowed, _ = attend(call(q, k, v, pe, window=window, sinks=2, sink_logit=s))
        assert torch.equal(windowed, full)


@pytest.mark.parametrize("window", [None, 32])
def test_the_written_out_sink_logit_path_never_holds_an_l_by_l_tensor(window):
    # float64 has no flash kernel (as a GPU has none here): the blocks are written out, each
    # over at most its own end's keys.
    T = 12 * QUERY_CHUNK
    leaves = [t.double().requires_grad_() for t in qkv(T, seed=0)]
    s = torch.tensor([0.5, -0.5], dtype=torch.float64)
    with LargestTensor() as seen:
        y, _ = attend(call(*leaves, pe_of("rope"), window=window, sink_logit=s))
        y.sum().backward()
    assert seen.largest <= 2 * 2 * QUERY_CHUNK * T < T * T


def test_kv_cache_decoding_with_streaming_llm_keeps_only_its_sinks_and_window():
    from posexp.extension import ExtensionConfig

    torch.manual_seed(0)
    ext = ExtensionConfig("streaming_llm", 1.0, 16, dict(sinks=2, window=5))
    m = GPT(
        ModelConfig(
            vocab_size=30, d_model=32, n_layers=2, n_heads=2, train_length=16, extension=ext
        )
    ).eval()
    T = 40
    idx = torch.randint(0, 30, (2, T))
    full = m(idx)["logits"]
    cache = m.new_cache()
    steps, held = [], []
    for t in range(T):
        steps.append(m(idx[:, t : t + 1], cache=cache)["logits"])
        held.append(max(layer["k_len"] for layer in cache.layers))
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    assert max(held) <= 2 + 2 * 5 < T
