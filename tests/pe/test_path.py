"""PaTH: logits against explicit d × d Householder matrices multiplied out (and worked numbers),
β = 0 against plain causal attention, the query-side (chunked) and key-side (decoding)
evaluations against each other, the forget gate's term, the convolution, gradients, bf16, the
KV cache through the model (beam reordering included) and an exact resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from posexp.config.paths import config_dir
from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.model.decoding import reorder_cache
from posexp.pe import PEContext, build_pe
from posexp.pe.path import PaTH, householder, path_attention, path_decode, path_logits

F64 = torch.float64


def inputs(T: int, d: int = 3, heads: int = 2, batch: int = 1, seed: int = 0):
    """q, k, v, unit directions w (B, H, T, d) and strengths β ∈ (0, 2) (B, H, T), float64."""
    g = torch.Generator().manual_seed(seed)
    q, k, v, w = (torch.randn(batch, heads, T, d, generator=g, dtype=F64) for _ in range(4))
    beta = 2 * torch.rand(batch, heads, T, generator=g, dtype=F64)
    return q, k, v, F.normalize(w, dim=-1), beta


def matrix(w: torch.Tensor, beta: float) -> torch.Tensor:
    """I − β w wᵀ, built as a d × d matrix."""
    return torch.eye(w.numel(), dtype=w.dtype) - beta * torch.outer(w, w)


def explicit_logits(q, k, w, beta) -> torch.Tensor:
    """q_iᵀ (H_i H_{i−1} ⋯ H_{j+1}) k_j by multiplying the matrices out, −inf for j > i."""
    B, H, T, _ = q.shape
    out = torch.full((B, H, T, T), float("-inf"), dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                for j in range(i + 1):
                    P = torch.eye(q.shape[-1], dtype=q.dtype)
                    for m in range(i, j, -1):  # H_i first, H_{j+1} last
                        P = P @ matrix(w[b, h, m], float(beta[b, h, m]))
                    out[b, h, i, j] = q[b, h, i] @ P @ k[b, h, j]
    return out


def explicit_attention(q, k, v, w, beta, c=None):
    """softmax(logits/√d + c_i − c_j) V, the logits from the matrices."""
    logits = explicit_logits(q, k, w, beta) / math.sqrt(q.shape[-1])
    if c is not None:
        logits = logits + c[..., :, None] - c[..., None, :]
    p = logits.softmax(-1)
    return p @ v, p


def test_one_householder_step_in_worked_numbers():
    # Two tokens, d = 2: only H_1 stands between query 1 and key 0; H_0 is never used.
    q = torch.tensor([[[[1.0, 1.0], [1.0, 2.0]]]], dtype=F64)
    k = torch.tensor([[[[3.0, 4.0], [0.0, 1.0]]]], dtype=F64)
    for w1, b1, expected in [
        ((1.0, 0.0), 2.0, 5.0),  # the reflection diag(−1, 1): −3 + 8
        ((0.6, 0.8), 1.0, 0.0),  # k_0 ∥ w_1 and β = 1: projected out entirely
        ((0.6, 0.8), 0.5, 5.5),  # (3, 4) − 0.5·5·(0.6, 0.8) = (1.5, 2); · (1, 2)
        ((0.0, 1.0), 0.0, 11.0),  # β = 0: the plain dot product 3 + 8
    ]:
        w = torch.tensor([[[[0.8, -0.6], list(w1)]]], dtype=F64)
        beta = torch.tensor([[[1.7, b1]]], dtype=F64)
        logits = path_logits(q, k, w, beta, 0, 2)[0, 0]
        assert logits[1, 0].item() == pytest.approx(expected, abs=1e-12)
        assert logits[1, 1].item() == 2.0 and logits[0, 0].item() == 7.0
        assert logits[0, 1].item() == float("-inf")


def test_every_logit_of_five_tokens_equals_the_matrix_product():
    q, k, _, w, beta = inputs(5)
    expected = explicit_logits(q, k, w, beta)
    assert torch.allclose(path_logits(q, k, w, beta, 0, 5), expected, atol=1e-12)
    # A chunk of queries (2..4) against every key up to its end.
    assert torch.allclose(path_logits(q, k, w, beta, 2, 5), expected[:, :, 2:5], atol=1e-12)
    assert torch.allclose(path_logits(q, k, w, beta, 1, 3), expected[:, :, 1:3, :3], atol=1e-12)


def test_zero_strength_is_plain_causal_attention():
    q, k, v, w, _ = inputs(9)
    y, _ = path_attention(q, k, v, w, torch.zeros(1, 2, 9, dtype=F64), chunk=4)
    assert torch.allclose(y, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-12)


def test_a_model_with_the_transforms_off_is_the_nope_model():
    cfg = dict(vocab_size=40, d_model=16, n_layers=2, n_heads=2, train_length=16)
    path = GPT(ModelConfig(pe="path", **cfg)).eval()
    with torch.no_grad():
        for i in range(2):
            path.pe.layer(i).beta_proj.weight.zero_()
            path.pe.layer(i).beta_proj.bias.fill_(-1e4)  # 2σ(−10⁴) is exactly 0
    nope = GPT(ModelConfig(pe="none", **cfg)).eval()
    unexpected = nope.load_state_dict(path.state_dict(), strict=False).unexpected_keys
    assert unexpected and all(key.startswith("pe.") for key in unexpected)
    idx = torch.randint(0, 40, (2, 11))
    with torch.no_grad():
        assert torch.allclose(path(idx)["logits"], nope(idx)["logits"], atol=1e-5)
        maps = path(idx, need_weights=True)["attention"]  # one (B, H, T, T) per layer
        for got, want in zip(maps, nope(idx, need_weights=True)["attention"], strict=True):
            assert got.shape == (2, 2, 11, 11) and torch.allclose(got, want, atol=1e-6)
        assert not torch.allclose(
            GPT(ModelConfig(pe="path", **cfg)).eval()(idx)["logits"], nope(idx)["logits"]
        )


@pytest.mark.parametrize("seed", range(4))
def test_householder_is_orthogonal_at_strength_two(seed):
    _, _, _, w, beta = inputs(1, d=5, heads=1, seed=seed)
    u = w[0, 0, 0]
    eye = torch.eye(5, dtype=F64)
    H = householder(eye, u, torch.tensor(2.0, dtype=F64))  # H applied to each basis vector
    assert torch.allclose(H, matrix(u, 2.0), atol=1e-12)
    assert torch.allclose(H @ H.T, eye, atol=1e-12) and torch.allclose(H, H.T)
    assert torch.linalg.det(H).item() == pytest.approx(-1.0)  # a reflection
    # Any strength: w goes to (1 − β) w, the plane ⟂ w is kept, so no vector ever grows.
    b = beta[0, 0, 0]
    assert torch.allclose(householder(u, u, b), (1 - b) * u)
    x = torch.randn(20, 5, dtype=F64, generator=torch.Generator().manual_seed(seed))
    x_perp = x - (x @ u)[:, None] * u
    assert torch.allclose(householder(x_perp, u, b), x_perp, atol=1e-12)
    assert bool((householder(x, u, b).norm(dim=-1) <= x.norm(dim=-1) + 1e-12).all())


@pytest.mark.parametrize("T", [1, 7, 11])
def test_chunked_equals_unchunked_equals_the_explicit_softmax(T):
    q, k, v, w, beta = inputs(T, batch=2, seed=3)
    c = F.logsigmoid(torch.randn(2, 2, T, dtype=F64)).cumsum(-1)
    expected_y, expected_p = explicit_attention(q, k, v, w, beta, c)
    for chunk in (1, 3, 4, T):
        y, p = path_attention(q, k, v, w, beta, c, need_weights=True, chunk=chunk)
        assert torch.allclose(y, expected_y, atol=1e-12)
        assert torch.allclose(p, expected_p, atol=1e-12) and p.shape == (2, 2, T, T)
        assert torch.allclose(p @ v, y, atol=1e-12)


def test_key_side_decoding_equals_the_query_side_forward():
    q, k, v, w, beta = inputs(8, batch=2, seed=5)
    c = F.logsigmoid(torch.randn(2, 2, 8, dtype=F64)).cumsum(-1)
    full, p_full = path_attention(q, k, v, w, beta, c, need_weights=True, chunk=3)
    # One token at a time, each new token's H_t applied to the carried keys (rank one).
    keys, ys = None, []
    for t in range(8):
        s = slice(t, t + 1)
        y, _, keys = path_decode(
            q[:, :, s], k[:, :, s], v[:, :, : t + 1], w[:, :, s], beta[:, :, s], keys, c[..., s], c
        )
        ys.append(y)
    assert torch.allclose(torch.cat(ys, 2), full, atol=1e-12)
    # The carried keys are H_7 ⋯ H_{j+1} k_j, multiplied out.
    for j in range(8):
        P = torch.eye(3, dtype=F64)
        for m in range(7, j, -1):
            P = P @ matrix(w[1, 0, m], float(beta[1, 0, m]))
        assert torch.allclose(keys[1, 0, j], P @ k[1, 0, j], atol=1e-12)
    # Three cached, then five new in one call: the same outputs and weights.
    _, _, cached_keys = path_decode(q[:, :, :3], k[:, :, :3], v, w[:, :, :3], beta[:, :, :3], None)
    y, p, _ = path_decode(
        q[:, :, 3:], k[:, :, 3:], v, w[:, :, 3:], beta[:, :, 3:], cached_keys, c[..., 3:], c, True
    )
    assert torch.allclose(y, full[:, :, 3:], atol=1e-12)
    assert torch.allclose(p, p_full[:, :, 3:], atol=1e-12)


def path_pe(forget_gate: bool = False, conv: int = 3, heads: int = 2, d: int = 4) -> PaTH:
    torch.manual_seed(0)
    ctx = PEContext(heads * d, heads, d, train_length=16, n_layers=2)
    return build_pe("path", ctx, conv=conv, forget_gate=forget_gate)


def test_the_forget_gate_adds_exactly_c_i_minus_c_j():
    layer = path_pe(forget_gate=True).layer(1)
    x = torch.randn(1, 6, 8)
    q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    pos = torch.arange(6)
    _, gated = layer.own_attention(q, k, v, x, pos, pos, need_weights=True)
    gate, layer.gate = layer.gate, None
    _, plain = layer.own_attention(q, k, v, x, pos, pos, need_weights=True)
    layer.gate = gate
    f = torch.sigmoid(x @ gate.proj.weight.T + gate.bias)[0]  # (T, H): the gate written out
    delta = (gated.double().log() - plain.double().log())[0]  # c_i − c_j − (log Z_i change)
    for h in range(2):
        for i in range(6):
            for j in range(i + 1):
                explicit = sum(math.log(f[m, h].item()) for m in range(j + 1, i + 1))
                got = (delta[h, i, j] - delta[h, i, i]).item()
                assert got == pytest.approx(explicit, abs=1e-5)


def test_directions_are_a_causal_short_convolution_then_unit_length():
    layer = path_pe(conv=3).layer(0)
    x = torch.randn(2, 9, 8)
    w = layer.directions(x, None, torch.float32)
    a = layer.w_proj(x).transpose(1, 2)  # (B, channels, T)
    conv = F.conv1d(a, layer.conv[:, None, :], padding=2, groups=8)[..., :9]  # causal part
    expected = F.normalize(conv.transpose(1, 2).reshape(2, 9, 2, 4), dim=-1).transpose(1, 2)
    assert torch.allclose(w, expected, atol=1e-6)
    assert torch.allclose(w.norm(dim=-1), torch.ones(2, 2, 9))
    moved = x.clone()
    moved[:, 4] += 1.0  # input 4 reaches the directions of tokens 4, 5, 6 only
    changed = (layer.directions(moved, None, torch.float32) - w).abs().amax((0, 1, 3)) > 1e-6
    assert changed.tolist() == [t in (4, 5, 6) for t in range(9)]
    plain = path_pe(conv=1).layer(0)
    assert plain.conv is None
    expected = F.normalize(plain.w_proj(x).view(2, 9, 2, 4), dim=-1).transpose(1, 2)
    assert torch.allclose(plain.directions(x, None, torch.float32), expected)
    beta = layer.strengths(x * 100, torch.float32)
    written = 2 / (1 + torch.exp(-(x * 100 @ layer.beta_proj.weight.T + layer.beta_proj.bias)))
    assert torch.allclose(beta, written.transpose(1, 2)) and bool(((beta >= 0) & (beta <= 2)).all())


@pytest.mark.parametrize("forget_gate", [False, True])
def test_gradients_match_finite_differences(forget_gate):
    q, k, v, w, beta = inputs(4, heads=1, seed=7)
    c = F.logsigmoid(torch.randn(1, 1, 4, dtype=F64)).cumsum(-1) if forget_gate else None
    leaves = [t.requires_grad_() for t in (q, k, v, w, beta) + ((c,) if forget_gate else ())]

    def f(q, k, v, w, beta, c=None):
        return path_attention(q, k, v, w, beta, c, chunk=3)[0]

    assert torch.autograd.gradcheck(f, leaves)
    # Through the layer: projections, convolution, normalisation and strengths too.
    layer = path_pe(conv=2, heads=1, d=3).layer(0).double()
    x = torch.randn(1, 4, 3, dtype=F64, requires_grad=True)
    qkv = [torch.randn(1, 1, 4, 3, dtype=F64, requires_grad=True) for _ in range(3)]
    pos = torch.arange(4)
    assert torch.autograd.gradcheck(
        lambda q, k, v, x: layer.own_attention(q, k, v, x, pos, pos)[0], (*qkv, x)
    )


def test_bf16_autocast_computes_in_fp32_and_caches_fp32_keys():
    layer = path_pe(forget_gate=True).layer(0)
    x = torch.randn(2, 40, 8)
    q, k, v = (torch.randn(2, 2, 40, 4) for _ in range(3))
    pos = torch.arange(40)
    want, _ = layer.own_attention(q, k, v, x, pos, pos)
    cache: dict = {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = layer.own_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), x, pos, pos)
        layer.own_attention(q, k, v, x, pos, pos, cache=cache)
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    assert (got.float() - want).abs().max().item() < 0.05
    assert cache["path_k"].dtype == torch.float32 and cache["path_k"].shape == (2, 2, 40, 4)


@pytest.mark.parametrize(("forget_gate", "conv"), [(False, 3), (True, 4), (True, 1)])
def test_the_kv_cache_equals_the_full_forward_and_follows_beam_reordering(forget_gate, conv):
    torch.manual_seed(0)
    params = {"forget_gate": forget_gate, "conv": conv}
    cfg = ModelConfig(50, d_model=16, n_layers=2, n_heads=2, pe="path", pe_params=params)
    model = GPT(cfg).eval()
    idx = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        full = model(idx)["logits"]
        cache = model.new_cache()
        steps = [model(idx[:, :5], cache=cache)["logits"]]
        steps += [model(idx[:, t : t + 1], cache=cache)["logits"] for t in range(5, 9)]
        assert torch.allclose(torch.cat(steps, 1), full[:, :9], atol=1e-5)
        # Beam search keeps rows (1, 0, 1): every cached tensor must follow, batch first.
        order = torch.tensor([1, 0, 1])
        reorder_cache(cache, order)
        rows = idx[order]
        after = model(rows[:, 9:], cache=cache)["logits"]
        assert torch.allclose(after, model(rows)["logits"][:, 9:], atol=1e-5)


def test_settings_defaults_per_layer_modules_and_errors():
    preset = yaml.safe_load((Path(config_dir()) / "pe" / "path.yaml").read_text())
    assert preset == {"name": "path", "conv": 3, "forget_gate": False}
    assert PaTH.settings() == ("conv", "forget_gate")
    pe = path_pe()
    assert pe.layer(0) is not pe.layer(1) and pe.layer(0).gate is None
    assert pe.layer(0).w_proj.weight is not pe.layer(1).w_proj.weight
    assert path_pe(forget_gate=True).layer(1).gate is not None
    for params, message in [
        ({"conv": 0}, "pe.conv must be a positive integer, got 0"),
        ({"conv": True}, "pe.conv must be a positive integer, got true"),
        ({"forget_gate": "yes"}, "pe.forget_gate must be true or false, got 'yes'"),
    ]:
        with pytest.raises(PosexpError, match=f"^{message}$"):
            PaTH.check_params(params, 32)
        with pytest.raises(PosexpError, match=f"^{message}$"):
            build_pe("path", PEContext(8, 2, 4, 16), **params)


def test_reports_name_path_with_its_forget_gate_pathfox():
    from posexp.pe.base import describe_pe

    assert describe_pe("path", params={"conv": 3, "forget_gate": True}).label == "PaTH-FoX"
    assert describe_pe("path", params={"conv": 3, "forget_gate": False}).label == "PaTH"
    assert describe_pe("rope", params={"base": 10000.0}).label == describe_pe("rope").label
