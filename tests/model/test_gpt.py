import json
import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.model import GPT, CausalSelfAttention, ModelConfig
from posexp.model.attention import sdpa_attention
from posexp.pe import PE_REGISTRY, PEContext, alibi_slopes, build_pe

PES = sorted(PE_REGISTRY)

# docs/maths.md §1, seed 000: d_model 4, h 2, d_k 2.
X = torch.tensor([[1.0, 0, 1, 1], [0, 1, 1, 0]])
W = {
    "1Q": [[1, 0], [0, 1], [1, 0], [0, 0]],
    "1K": [[0, 1], [1, 0], [0, 1], [1, 0]],
    "1V": [[1, 1], [0, 0], [1, 0], [0, 1]],
    "2Q": [[0, 1], [1, 0], [0, 0], [1, 1]],
    "2K": [[1, 0], [0, 0], [1, 1], [0, 1]],
    "2V": [[0, 1], [1, 0], [0, 1], [1, 0]],
}


def seed_attention() -> CausalSelfAttention:
    attn = CausalSelfAttention(ModelConfig(vocab_size=2, d_model=4, n_heads=2, pe="none"))
    wq = torch.cat([torch.tensor(W["1Q"]), torch.tensor(W["2Q"])], 1).float()
    wk = torch.cat([torch.tensor(W["1K"]), torch.tensor(W["2K"])], 1).float()
    wv = torch.cat([torch.tensor(W["1V"]), torch.tensor(W["2V"])], 1).float()
    with torch.no_grad():
        attn.qkv.weight.copy_(torch.cat([wq, wk, wv], 1).T)  # nn.Linear stores W transposed
        attn.out.weight.copy_(torch.eye(4))
    return attn


def test_seed_two_head_worked_example():
    attn = seed_attention()
    nope = build_pe("none", PEContext(4, 2, 2, 2))
    q, k, v = (t.view(1, 2, 2, 2).transpose(1, 2) for t in attn.qkv(X[None]).split(4, dim=2))
    pos = torch.arange(2)
    heads = sdpa_attention(q, k, v, pos, pos, nope, causal=False)[0]
    # head_i values from the seed (two decimals; the seed rounds A before multiplying).
    assert torch.allclose(heads[0], torch.tensor([[1.50, 1.00], [1.67, 1.34]]), atol=0.02)
    assert torch.allclose(heads[1], torch.tensor([[1.00, 1.89], [1.00, 1.67]]), atol=0.02)
    # A2[0] = softmax([6, 3]/√2): closed form sigmoid(3/√2) = 0.89305 (the two-decimal worked example rounds the
    # logits first and quotes 0.8928).
    a2 = torch.softmax(q[0, 1] @ k[0, 1].T / math.sqrt(2), -1)
    p = 1 / (1 + math.exp(-3 / math.sqrt(2)))
    assert torch.allclose(a2[0], torch.tensor([p, 1 - p]), atol=1e-6)
    assert torch.allclose(a2[0], torch.tensor([0.8928, 0.1072]), atol=5e-4)
    # The causal module: the last token sees both tokens, so its row is the seed's row.
    out, weights = attn(X[None], nope, pos, need_weights=True)
    assert torch.allclose(weights[0, :, 1], torch.tensor([[0.67, 0.33], [0.67, 0.33]]), atol=0.01)
    assert torch.allclose(out[0, 1], torch.tensor([1.67, 1.34, 1.00, 1.67]), atol=0.02)
    assert torch.allclose(weights[0, :, 0], torch.tensor([[1.0, 0.0], [1.0, 0.0]]))


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16, 32])
def test_attention_block_holds_4d2_weights(heads):
    d = 64
    attn = CausalSelfAttention(ModelConfig(vocab_size=2, d_model=d, n_heads=heads))
    assert sum(p.numel() for p in attn.parameters()) == 4 * d * d
    assert (
        sum(p.numel() for p in torch.nn.MultiheadAttention(d, heads, bias=False).parameters())
        == 4 * d * d
    )


def test_seed_parameter_counts_d512():
    assert 3 * 512 * 512 == 786_432
    attn = CausalSelfAttention(ModelConfig(vocab_size=2, d_model=512, n_heads=8))
    assert sum(p.numel() for p in attn.parameters()) == 1_048_576


@pytest.mark.parametrize("pe_name", ["learned", "rope", "neox_rope", "alibi"])
def test_qkv_gradient_is_one_concatenation_not_a_sum_of_zero_filled_slices(pe_name):
    # Indexing qkv[:, :, i] would give each of q, k, v a backward that fills a zero copy of qkv
    # and adds the three; split and unbind concatenate their gradients once.
    model = GPT(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, pe=pe_name))
    out = model(torch.randint(0, 50, (2, 9)), torch.randint(0, 50, (2, 9)))["loss"]
    seen, stack = set(), [out.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    names = {type(fn).__name__ for fn in seen}
    assert not names & {"SelectBackward0", "SliceBackward0"}, names
    assert names & {"UnbindBackward0", "SplitWithSizesBackward0"}


def reference_attention(q, k, v, slopes=None, bias=None):
    """softmax(QKᵀ/√d_k + ALiBi or a given bias) V with a causal mask, written independently."""
    T = q.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    if slopes is not None:
        scores = scores - slopes.view(1, -1, 1, 1) * (i - j).clamp(min=0)
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(j > i, float("-inf"))
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("pe_name", PES)
@pytest.mark.parametrize("T", [7, 600])  # 600 > one ALiBi query chunk
def test_sdpa_path_equals_explicit_softmax(pe_name, T):
    cfg = ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, pe=pe_name, train_length=T)
    model = GPT(cfg)
    attn = model.blocks[0].attn
    x = torch.randn(2, T, 32)
    pos = torch.arange(T)
    q, k, v = (t.view(2, T, 4, 8).transpose(1, 2) for t in attn.qkv(x).split(32, dim=2))
    q, k = model.pe.rotate(q, k, pos, pos, model.pe.prepare(T, x.device))
    slopes = alibi_slopes(4) if pe_name == "alibi" else None
    # Other bias PEs (their bias itself is tested in tests/pe/): the full (H, T, T) bias at once,
    # against the chunked SDPA path.
    bias = model.pe.bias(pos, pos, q.dtype) if model.pe.has_bias and slopes is None else None
    expected = reference_attention(q, k, v, slopes, bias)
    got = sdpa_attention(q, k, v, pos, pos, model.pe)
    assert torch.allclose(got, expected, atol=1e-5)


def test_nope_last_token_invariant_to_permuting_earlier_tokens():
    # One causal layer: the last query sees the earlier tokens as a set. (With more layers the
    # earlier tokens' own, causal, outputs change under permutation, so the property is per layer.)
    model = GPT(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, pe="none")).eval()
    rope = GPT(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, pe="rope")).eval()
    with torch.no_grad():  # sharper attention than at init, so position effects are visible
        model.blocks[0].attn.qkv.weight.mul_(20)
        rope.blocks[0].attn.qkv.weight.mul_(20)
    idx = torch.tensor([[5, 9, 13, 21, 34, 7]])
    perm = torch.tensor([[21, 5, 34, 9, 13, 7]])  # same earlier tokens, new order, same last
    a, b = model(idx)["logits"][0, -1], model(perm)["logits"][0, -1]
    assert torch.allclose(a, b, atol=1e-5)
    assert not torch.allclose(rope(idx)["logits"][0, -1], rope(perm)["logits"][0, -1], atol=1e-4)


@pytest.mark.parametrize("pe_name", PES)
def test_kv_cache_decoding_equals_full_forward(pe_name):
    model = GPT(
        ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, pe=pe_name, train_length=32)
    ).eval()
    idx = torch.randint(0, 40, (3, 20))
    full = model(idx)["logits"]
    cache = model.new_cache()
    steps = [model(idx[:, :8], cache=cache)["logits"]]
    for t in range(8, 20):
        steps.append(model(idx[:, t : t + 1], cache=cache)["logits"])
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


def test_generate_greedy_matches_argmax_of_full_recompute():
    model = GPT(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, pe="alibi")).eval()
    prompt = torch.randint(0, 40, (2, 5))
    out = model.generate(prompt, 6)
    seq = prompt
    for _ in range(6):
        seq = torch.cat([seq, model(seq)["logits"][:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq[:, 5:])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_heads": 3}, "heads=3 does not divide d_model=32"),
        ({"n_heads": 0}, "heads must be a positive integer, got 0"),
        ({"n_heads": -2}, "heads must be a positive integer"),
        (
            {"pe": "nope"},
            f"unknown pe 'nope'; allowed: {', '.join(sorted(PE_REGISTRY))}$",
        ),
    ],
)
def test_bad_model_config_is_one_line(kwargs, message):
    with pytest.raises(PosexpError, match=message) as e:
        GPT(ModelConfig(vocab_size=10, d_model=32, **kwargs))
    assert "\n" not in str(e.value)


def test_model_config_round_trips_with_the_extension_typed():
    ext = ExtensionConfig.from_dict(
        {"method": "yarn", "factor": 4, "original_length": 32, "beta_fast": 16}
    )
    cfg = ModelConfig(
        vocab_size=10, d_model=16, n_heads=2, pe="rope", extension=ext, train_length=32
    )
    saved = json.loads(json.dumps(cfg.to_dict()))  # as meta.json holds it
    # The flat YAML layout, every method param at its effective value (old run dirs hold the same).
    assert saved["extension"] == {
        "method": "yarn",
        "factor": 4.0,
        "original_length": 32,
        "beta_fast": 16.0,
        "beta_slow": 1.0,
        "attention_factor": None,
    }
    loaded = ModelConfig.from_dict(saved)
    assert loaded == cfg and isinstance(loaded.extension, ExtensionConfig)
    assert loaded.extension.params == {
        "beta_fast": 16.0,
        "beta_slow": 1.0,
        "attention_factor": None,
    }
    # A config saved without an extension (or an empty one) means none.
    del saved["extension"]
    assert ModelConfig.from_dict(saved).extension == ExtensionConfig()


def test_model_config_takes_only_a_typed_extension():
    with pytest.raises(TypeError, match="ModelConfig.extension must be an ExtensionConfig"):
        ModelConfig(vocab_size=10, extension={"method": "pi", "factor": 2})
    with pytest.raises(PosexpError, match="^unknown param 'beta_fast' for extension 'pi'"):
        ModelConfig.from_dict({"vocab_size": 10, "extension": {"method": "pi", "beta_fast": 2}})


def test_the_saved_config_names_no_kernel_and_another_kernel_choice_gives_the_same_logits():
    from posexp.kernels import onednn_linear
    from posexp.kernels.choice import KernelChoice

    cfg = ModelConfig(vocab_size=60, d_model=32, n_layers=2, n_heads=2, pe="alibi")
    saved = cfg.to_dict()
    assert not {"attention", "causal_kernel", "linear_kernel", "kernels"} & set(saved)
    torch.manual_seed(0)
    trained = GPT(ModelConfig.from_dict(saved), KernelChoice(bias="sdpa")).eval()
    tokens = torch.randint(0, 60, (2, 150))
    linear = "onednn" if onednn_linear.available() else "torch"
    loaded = GPT(ModelConfig.from_dict(saved), KernelChoice(bias="cpp", linear=linear)).eval()
    loaded.load_state_dict(trained.state_dict())  # the same weights, whatever the kernels
    with torch.no_grad():
        want = trained(tokens)["logits"]
        torch.testing.assert_close(loaded(tokens)["logits"], want, rtol=1e-4, atol=1e-4)
        # Switched back on a loaded model: the layers and the encoding follow.
        again = loaded.use_kernels(KernelChoice(bias="sdpa"))
        assert all(m.kernel == "torch" for m in again.modules() if hasattr(m, "kernel"))
        torch.testing.assert_close(again(tokens)["logits"], want)


def test_a_saved_config_naming_a_kernel_is_a_one_line_error():
    saved = {**ModelConfig(vocab_size=10).to_dict(), "causal_kernel": "matmul"}
    with pytest.raises(PosexpError, match="unknown fields causal_kernel; allowed: d_ff, "):
        ModelConfig.from_dict(saved)


def test_a_backend_that_gives_up_hands_the_call_to_the_next():
    from posexp.model.attention import BACKENDS, AttentionCall, attend

    torch.manual_seed(0)
    pe = build_pe("alibi", PEContext(16, 2, 8, 32))
    q, k, v = torch.randn(3, 1, 2, 20, 8).unbind(0)
    pos = torch.arange(20)
    tried = []

    def gives_up(q, k, v):
        tried.append(1)
        return None

    with torch.no_grad():
        got, weights = attend(AttentionCall(q, k, v, pos, pos, pe, bias_kernel=gives_up))
        want = sdpa_attention(q, k, v, pos, pos, pe)
    assert tried == [1] and weights is None
    torch.testing.assert_close(got, want)
    assert BACKENDS[-1].name == "sdpa" and BACKENDS[-1].runs(None)  # takes every call
