"""Blockwise causal attention (extension=blockwise) against its definition written pair by pair."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.model import GPT, ModelConfig
from posexp.model.attention import block_local_attention
from posexp.pe import PEContext, accepted_extensions, build_pe
from tests.helpers import run_config


def visible(i: int, j: int, block: int) -> bool:
    """Sun et al. §3.3: causal, and the key's block is the query's or the one before."""
    return j <= i and j // block >= i // block - 1


def reference(q, k, v, pe, block):
    """softmax over the visible keys only, one query at a time in plain loops."""
    B, H, T, d = q.shape
    bias = pe.bias(torch.arange(T), torch.arange(T), q.dtype) if pe.has_bias else None
    out = torch.zeros_like(q)
    weights = torch.zeros(B, H, T, T)
    for i in range(T):
        keys = [j for j in range(T) if visible(i, j, block)]
        s = torch.stack([(q[:, :, i] * k[:, :, j]).sum(-1) / math.sqrt(d) for j in keys], -1)
        if bias is not None:
            s = s + bias[:, i, keys]
        w = s.softmax(-1)
        weights[:, :, i, keys] = w
        out[:, :, i] = (w[..., None] * v[:, :, keys]).sum(-2)
    return out, weights


@pytest.mark.parametrize("pe_name", ["none", "alibi", "t5"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_equals_the_definition_pair_by_pair(pe_name, need_weights):
    torch.manual_seed(0)
    pe = build_pe(pe_name, PEContext(16, 2, 8, 16))
    q, k, v = (torch.randn(2, 2, 37, 8) for _ in range(3))
    pos = torch.arange(37)
    y, w = block_local_attention(q, k, v, pos, pos, pe, 6, need_weights)
    ref_y, ref_w = reference(q, k, v, pe, 6)
    assert torch.allclose(y, ref_y, atol=1e-5)
    if need_weights:
        assert torch.allclose(w, ref_w, atol=1e-6)
        assert w[0, 0, 20, :12].abs().sum() == 0 and w[0, 0, 20, 12:21].sum() > 0.99


def model(pe: str, method: str = "none", block=None, train_length: int = 16) -> GPT:
    torch.manual_seed(0)
    ext = ExtensionConfig.from_dict(
        {"method": method, "original_length": train_length}
        | ({"block": block} if method == "blockwise" else {})
    )
    cfg = ModelConfig(
        vocab_size=40,
        d_model=32,
        n_layers=2,
        n_heads=4,
        pe=pe,
        train_length=train_length,
        extension=ext,
    )
    return GPT(cfg).eval()


@pytest.mark.parametrize("pe", ["rope", "xpos", "alibi", "cope"])
def test_inside_two_blocks_it_is_plain_causal_attention(pe):
    # b = L0 / 2 = 8: a query in block 0 or 1 sees every earlier key, so 16 tokens are unchanged.
    idx = torch.randint(0, 40, (2, 16))
    plain, blocked = model(pe), model(pe, "blockwise")
    blocked.load_state_dict(plain.state_dict())
    assert torch.allclose(plain(idx)["logits"], blocked(idx)["logits"], atol=1e-5)
    longer = torch.randint(0, 40, (2, 40))
    assert not torch.allclose(plain(longer)["logits"], blocked(longer)["logits"], atol=1e-3)


@pytest.mark.parametrize("pe", ["rope", "alibi", "cope", "sinusoidal"])
def test_kv_cache_decoding_equals_the_full_pass(pe):
    m = model(pe, "blockwise", block=5)
    idx = torch.randint(0, 40, (2, 41))
    cache = m.new_cache()
    steps = [m(idx[:, :7], cache=cache)["logits"]]
    for t in range(7, 41):
        steps.append(m(idx[:, t : t + 1], cache=cache)["logits"])
    assert torch.allclose(torch.cat(steps, 1), m(idx)["logits"], atol=1e-5)


def test_every_encoding_takes_it_and_no_run_trains_with_it():
    for pe in ("none", "rope", "alibi", "xpos", "cope", "learned"):
        assert "blockwise" in accepted_extensions(pe)
    with pytest.raises(PosexpError, match="extension 'blockwise' is training-free"):
        run_config("extension=blockwise")


def test_a_block_past_half_the_training_length_is_refused():
    with pytest.raises(PosexpError, match=r"extension.block must be at most L0 / 2 = 8 .* got 9"):
        model("rope", "blockwise", block=9)
    with pytest.raises(PosexpError, match="extension.block must be a positive integer"):
        ExtensionConfig.from_dict({"method": "blockwise", "block": 0})
