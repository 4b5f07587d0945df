"""FlexAttention for bias PEs: the same numbers as the explicit-bias path, chosen in one place."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from posexp.kernels import flex
from posexp.kernels.choice import KernelChoice
from posexp.model import GPT, ModelConfig
from posexp.pe import PE_REGISTRY, PEContext, build_pe

SDPA = KernelChoice(bias="sdpa")  # the reference the kernels are compared against

BIAS_PES = sorted(name for name, cls in PE_REGISTRY.items() if cls.kind == "bias")


def test_every_bias_pe_has_a_score_mod():
    assert BIAS_PES  # alibi, t5, ...: found in the registry, not listed here
    for name in BIAS_PES:
        pe = build_pe(name, PEContext(d_model=64, n_heads=4, head_dim=16, train_length=64))
        assert callable(pe.score_mod()), name


def test_static_captures_reach_the_tensors_of_helpers_a_score_mod_calls():
    # FIRE's score_mod calls its MLP, a closure of its own: its tensors are fixed in shape too.
    pe = build_pe("fire", PEContext(d_model=64, n_heads=4, head_dim=16, train_length=64))
    with torch.no_grad():
        score_mod = pe.score_mod(64)
    flex._static_captures(score_mod)
    captured = inspect.getclosurevars(inspect.getclosurevars(score_mod).nonlocals["mlp"]).nonlocals
    tensors = [v for v in captured.values() if isinstance(v, torch.Tensor)]
    tensors += [t for unit in captured["units"] for t in unit]
    assert len(tensors) > 2
    for t in tensors:
        assert getattr(t, "_dynamo_static_indices", None) == set(range(t.dim()))


@pytest.mark.parametrize("name", BIAS_PES)
@pytest.mark.parametrize("T", [40, 200])  # 40: where 16-dim heads go wrong; 200: two blocks
def test_flex_equals_explicit_softmax(name, T):
    torch.manual_seed(0)
    H, D = 4, 16  # lengths not a multiple of FlexAttention's 128-token blocks
    pe = build_pe(name, PEContext(d_model=H * D, n_heads=H, head_dim=D, train_length=64))
    with torch.no_grad():
        if hasattr(pe, "table"):  # a trained-looking T5 table, not the near-zero init
            pe.table.normal_()
        q, k, v = (torch.randn(2, H, T, D) for _ in range(3))
        pos = torch.arange(T)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D) + pe.bias(pos, pos, torch.float32)
        scores = scores.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        expected = scores.softmax(-1) @ v
        got = flex.flex_causal_attention(q, k, v, pe.score_mod(T))
    assert got is not None and (got - expected).abs().max() < 1e-5


@pytest.mark.parametrize("name", BIAS_PES)
def test_models_agree_across_backends_with_and_without_the_kv_cache(name):
    torch.manual_seed(0)
    cfg = dict(vocab_size=260, d_model=64, n_layers=2, n_heads=2, pe=name, train_length=64)
    assert flex.use_flex("auto", torch.device("cpu"), False, 0.0)
    auto, sdpa = GPT(ModelConfig(**cfg)).eval(), GPT(ModelConfig(**cfg), SDPA).eval()
    sdpa.load_state_dict(auto.state_dict())
    x = torch.randint(0, 260, (2, 150))
    with torch.no_grad():
        assert (auto(x)["logits"] - sdpa(x)["logits"]).abs().max() < 1e-5
        # The prompt goes through FlexAttention, each new token through the cached SDPA path.
        a = auto.generate(x[:, :40], 20)
        # Every token it chose is the greedy one of the all-SDPA model recomputed from scratch.
        # An untrained model's top logits can tie to within rounding (the two backends may then
        # pick differently), so a choice within 1e-4 of the maximum counts as greedy.
        full = sdpa(torch.cat([x[:, :40], a], 1))["logits"][:, 39:-1]
        chosen = full.gather(-1, a[..., None])[..., 0]
        assert (full.max(-1).values - chosen).max() < 1e-4


@pytest.mark.parametrize(
    ("backend", "device", "grad", "dropout", "expected"),
    [
        ("auto", "cpu", False, 0.0, True),  # CPU evaluation
        ("flex", "cpu", False, 0.0, True),
        ("auto", "cpu", True, 0.0, False),  # CPU training: torch has no CPU backward for flex
        ("auto", "cuda", True, 0.0, True),  # GPU training
        ("auto", "cuda", True, 0.1, False),  # FlexAttention has no attention dropout
        ("sdpa", "cuda", False, 0.0, False),  # the fallback, asked for
        ("auto", "mps", False, 0.0, False),
    ],
)
def test_the_backend_is_chosen_in_one_place(backend, device, grad, dropout, expected):
    assert flex.use_flex(backend, torch.device(device), grad, dropout) is expected


# Where the bug lived (below 128, 8 mod 16, where the padding acts) with both neighbours of
# each, every length up to 17, then lengths on each side of a vector and of a block up to 300
# (each length compiles afresh: every length to 136 took 53 s of CI over the two widths).
BUGGY = range(8, 137, 16)
LENGTHS = sorted(
    {*range(2, 18), *(t + d for t in BUGGY for d in (-1, 0, 1)), 31, 32, 33, 63, 64, 65}
    | {127, 128, 129, 152, 200, 255, 256, 257, 300}
)


@pytest.mark.parametrize("simdlen", [None, 256])  # this CPU's vectors, and AVX2's 8 floats
def test_cpu_flex_equals_sdpa_at_every_length_for_small_heads(simdlen):
    """torch 2.13's CPU kernel at 256-bit vectors was wrong for 8- and 16-dim heads at lengths
    below 128 that are 8 mod 16; flex_causal_attention pads those lengths (flex.py)."""
    import torch._inductor.config as inductor

    torch._dynamo.reset()  # compile afresh at this vector width, and again after
    try:
        with inductor.patch({"cpp.simdlen": simdlen}), torch.no_grad():
            for D in (8, 16, 32):
                torch.manual_seed(D)
                pe = build_pe(
                    "alibi", PEContext(d_model=4 * D, n_heads=4, head_dim=D, train_length=64)
                )
                wrong = []
                for T in LENGTHS:
                    q, k, v = (torch.randn(2, 4, T, D) for _ in range(3))
                    pos = torch.arange(T)
                    bias = pe.bias(pos, pos, torch.float32).masked_fill(
                        pos > pos[:, None], -math.inf
                    )
                    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
                    got = flex.flex_causal_attention(q, k, v, pe.score_mod())
                    if not (got is not None and (got - expected).abs().max() < 1e-5):
                        wrong.append(T)
                assert not wrong, f"head dim {D}: flex differs from SDPA at lengths {wrong}"
    finally:
        torch._dynamo.reset()


def test_the_cpu_kernel_runs_in_fp32_under_bf16_autocast():
    # Autocast would hand FlexAttention bf16 inputs, and torch 2.13's CPU kernel is slower in
    # bf16; the kernel gets fp32 and its output is cast back to the inputs' dtype.
    torch.manual_seed(0)
    pe = build_pe("alibi", PEContext(d_model=64, n_heads=4, head_dim=16, train_length=64))
    q, k, v = (torch.randn(1, 4, 200, 16).bfloat16() for _ in range(3))
    with torch.no_grad():
        want = flex.flex_causal_attention(q.float(), k.float(), v.float(), pe.score_mod(200))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = flex.flex_causal_attention(q, k, v, pe.score_mod(200))
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, want.bfloat16())


def test_small_heads_use_flex_on_the_cpu_too():
    cfg = dict(vocab_size=60, d_model=64, n_layers=1, n_heads=8, pe="alibi", train_length=64)
    auto = GPT(ModelConfig(**cfg), KernelChoice(bias="flex")).eval()
    sdpa = GPT(ModelConfig(**cfg), SDPA).eval()
    sdpa.load_state_dict(auto.state_dict())
    x = torch.randint(0, 60, (2, 40))  # 8-dim heads at a length 8 mod 16
    calls = []
    real = flex.flex_causal_attention
    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(flex, "flex_causal_attention", lambda *a: calls.append(1) or real(*a))
        assert (auto(x)["logits"] - sdpa(x)["logits"]).abs().max() < 1e-5
    assert calls


@pytest.mark.parametrize(
    ("length", "padded"), [(2, 16), (16, 16), (40, 48), (127, 128), (129, 129)]
)
def test_short_cpu_inputs_are_padded_to_a_multiple_of_16(length, padded):
    assert flex.cpu_padded_length(length) == padded


def test_an_unknown_backend_is_refused():
    from posexp.errors import PosexpError

    with pytest.raises(
        PosexpError, match="unknown attention backend 'fast'; allowed: auto, cpp, flex, sdpa"
    ):
        KernelChoice(bias="fast")


def test_the_run_log_says_which_attention_runs():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert flex.describe("auto", cpu, None) == "no bias"
    assert flex.describe("auto", cuda, "bias") == "flex for the position bias"
    assert flex.describe("auto", cpu, "bias").endswith("C++ kernel (else flex) to evaluate")
    assert flex.describe("flex", cpu, "bias").endswith(" flex to evaluate")
    explicit = flex.describe("sdpa", cuda, "bias")
    assert explicit.startswith("sdpa with an explicit position bias")
    assert flex.describe("auto", cuda, "gate").startswith("flex for the forget gate (its gradients")
    assert flex.describe("auto", cpu, "gate").endswith("(else flex of 1,024+ tokens) to evaluate")
    assert flex.describe("flex", cpu, "gate").endswith("train, flex of 1,024+ tokens to evaluate")


@pytest.mark.parametrize("name,kind", [("rope", None), ("alibi", "bias"), ("fox", "gate")])
def test_each_encoding_names_its_kernel_kind(name, kind):
    ctx = PEContext(d_model=32, n_heads=2, head_dim=16, train_length=16, n_layers=1)
    assert build_pe(name, ctx).flex_kind == kind


def valid_blocks(mask) -> list[tuple[set[int], set[int]]]:
    """Per query block: the partial and the full key blocks a BlockMask lists."""
    rows = []
    for i in range(mask.kv_num_blocks.shape[-1]):
        partial = mask.kv_indices[0, 0, i, : mask.kv_num_blocks[0, 0, i]].tolist()
        full = mask.full_kv_indices[0, 0, i, : mask.full_kv_num_blocks[0, 0, i]].tolist()
        rows.append((set(partial), set(full)))
    return rows


@pytest.mark.parametrize("length", [1, 5, 127, 128, 129, 300, 512, 1000])
def test_the_causal_block_mask_is_what_create_block_mask_builds(length):
    from torch.nn.attention.flex_attention import create_block_mask

    ours = flex.causal_block_mask(length, "cpu")
    reference = create_block_mask(flex._causal, None, None, length, length, device="cpu")
    assert torch.equal(ours.to_dense(), reference.to_dense())
    assert valid_blocks(ours) == valid_blocks(reference)


def test_the_causal_block_mask_needs_no_dense_mask():
    # A dense L x L mask at 2^18 tokens is 64 GiB, more than this machine has: building the
    # mask at all shows that its size follows (L / 128)^2.
    mask = flex.causal_block_mask(2**18, "cpu")
    assert mask.shape[-2:] == (2**18, 2**18) and mask.kv_indices.numel() == (2**18 // 128) ** 2


def test_a_call_that_compiles_is_announced_and_timed_apart(monkeypatch, caplog):
    graphs = iter([0, 1, 1, 1])  # the first call compiles one graph, the second none
    monkeypatch.setattr(flex, "_graphs_compiled", lambda: next(graphs))
    monkeypatch.setattr(flex, "_compiled", lambda kind="bias": lambda q, k, v, **kw: q)
    monkeypatch.setattr(flex, "_compile_seconds", [0.0])
    q = torch.zeros(1, 1, 4, 8)
    with caplog.at_level("INFO", logger="posexp"):
        flex.flex_causal_attention(q, q, q, lambda score, b, h, i, j: score)
        first = flex.compile_seconds()
        flex.flex_causal_attention(q, q, q, lambda score, b, h, i, j: score)
    assert first > 0 and flex.compile_seconds() == first  # only the compiling call counts
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("compiling FlexAttention for the attention bias")
    assert messages[1].startswith("FlexAttention compiled in ") and len(messages) == 2
