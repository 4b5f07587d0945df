"""Self-Extend, ReRoPE and log-length scaling against a direct construction of their attention.

The reference builds, pair by pair in plain Python, the relative distance each method assigns
to query i and key j, then scores q_i against k_j rotated back by that distance (RoPE's score
depends only on the difference of the two positions). Nothing of the kernel's block logic,
window shortcut or position functions is shared with it.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig, get_extension
from posexp.extension.attention import log_length_scale
from posexp.extension.methods.self_extend import smallest_group
from posexp.model import GPT, ModelConfig
from posexp.model.attention import remapped_attention
from posexp.pe import PEContext, build_pe
from tests.helpers import run_config

D = 8  # head dim
THETA = [10000.0 ** (-2 * t / D) for t in range(D // 2)]


def self_extend_distance(i: int, j: int, window: int, group: int) -> int:
    """Jin et al.: the neighbour distance inside the window, the grouped one past it."""
    if i - j < window:
        return i - j
    return i // group - j // group + window - window // group


def rerope_distance(i: int, j: int, window: int, leaky_k: float | None) -> float:
    """Su: the distance, clipped at the window (ReRoPE) or continued with slope 1/k (leaky)."""
    r = i - j
    if r < window:
        return r
    return window if leaky_k is None else window + (r - window) / leaky_k


def rotate_by(x: torch.Tensor, angle_steps: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_t, x_{t+D/2}) of x (..., D) by angle_steps·θ_t (broadcast)."""
    theta = torch.tensor(THETA, dtype=torch.float64)
    a = angle_steps[..., None] * theta
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat((x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin()), dim=-1)


def reference(q, k, v, distance) -> torch.Tensor:
    """softmax_j(q_i · R(-r_ij) k_j / √D) v_j over j <= i, r_ij the method's distance."""
    T = q.shape[2]
    r = torch.tensor(distance, dtype=torch.float64)  # (T, T)
    k_back = rotate_by(k[:, :, None, :, :], -r)  # (B, H, Tq, Tk, D)
    scores = (q[:, :, :, None, :] * k_back).sum(-1) / math.sqrt(D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v


def rope(method: str = "none", train_length: int = 32, **params) -> torch.nn.Module:
    ext = ExtensionConfig(method, params.pop("factor", 1.0), train_length, params)
    return build_pe("rope", PEContext(D * 2, 2, D, train_length, ext))


def qkv(T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 2, T, D, generator=g, dtype=torch.float64) for _ in range(3))


@pytest.mark.parametrize("need_weights", [False, True], ids=["sdpa", "explicit"])
@pytest.mark.parametrize("window,group", [(8, 3), (5, 2), (16, 4), (8, 1), (200, 3)])
def test_self_extend_matches_the_pairwise_construction(window, group, need_weights):
    T = 300  # crosses the kernel's query blocks (128), so block and window edges both occur
    q, k, v = qkv(T)
    pe = rope("self_extend", train_length=256, window=window, group=group)
    plan = pe.ctx.extension.attention_plan()
    pos = torch.arange(T)
    got, _ = remapped_attention(q, k, v, pos, pos, plan, pe.rotate_at, need_weights)
    dist = [[self_extend_distance(i, j, window, group) for j in range(T)] for i in range(T)]
    # float32 frequencies bound the agreement
    torch.testing.assert_close(got, reference(q, k, v, dist), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("window,leaky_k", [(16, None), (7, None), (16, 4.0), (10, 2.5)])
def test_rerope_matches_the_pairwise_construction(window, leaky_k):
    T = 200
    q, k, v = qkv(T, seed=1)
    pe = rope("rerope", window=window, leaky_k=leaky_k)
    plan = pe.ctx.extension.attention_plan()
    pos = torch.arange(T)
    fast, _ = remapped_attention(q, k, v, pos, pos, plan, pe.rotate_at)
    got, weights = remapped_attention(q, k, v, pos, pos, plan, pe.rotate_at, need_weights=True)
    dist = [[rerope_distance(i, j, window, leaky_k) for j in range(T)] for i in range(T)]
    expected = reference(q, k, v, dist)
    # Both paths (SDPA, explicit softmax); float32 frequencies bound the agreement.
    torch.testing.assert_close(fast, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    # The weights returned are the softmax itself: rows sum to 1, nothing above the diagonal.
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, T, dtype=torch.float64))
    assert weights.triu(1).abs().max() == 0


def test_distances_at_the_window_edge_and_group_boundaries():
    # Worked by hand: W = 4, G = 2 (shift 4 - 2 = 2). i - j = 3 keeps 3; i - j = 4 at (10, 6):
    # 5 - 3 + 2 = 4; at (11, 7): 5 - 3 + 2 = 4; at (11, 6): 5 - 3 + 2 = 4 (distance 5 grouped).
    pe = rope("self_extend", window=4, group=2)
    far = pe.ctx.extension.attention_plan().far
    for i, j, expected in [(10, 6, 4), (11, 7, 4), (11, 6, 4), (12, 6, 5), (20, 0, 12)]:
        fq, fk = far(torch.tensor([i]), torch.tensor([j]))
        assert float(fq - fk) == expected == self_extend_distance(i, j, 4, 2)
    # ReRoPE w = 16: every distance from 16 on is 16; leaky k = 4: 16 + (40 - 16)/4 = 22.
    assert rerope_distance(40, 0, 16, None) == 16 and rerope_distance(40, 0, 16, 4.0) == 22
    fq, fk = (
        rope("rerope", window=16, leaky_k=4.0)
        .ctx.extension.attention_plan()
        .far(torch.tensor([40]), torch.tensor([0]))
    )
    assert float(fq - fk) == 22


def test_group_follows_the_target_length():
    # Largest grouped distance at length L: floor((L - 1)/G) + W - floor(W/G), to stay <= L0 - 1.
    # L0 4096, W 1024, 4x: G 5 gives 3276 + 1024 - 204 = 4096 (one too many), G 6 gives 3584.
    assert smallest_group(4096, 1024, 4 * 4096) == 6
    # L0 64, W 16, 16x: G 21 gives 48 + 16 = 64, G 22 gives 46 + 16 = 62.
    assert smallest_group(64, 16, 1024) == 22
    assert smallest_group(64, 16, 64) == 1
    plan = ExtensionConfig("self_extend", 16.0, 64).attention_plan()
    assert plan.window == 16  # L0 / 4
    fq, fk = plan.far(torch.tensor([1023]), torch.tensor([0]))
    assert float(fq - fk) == 62


def test_log_length_scale_closed_form():
    got = log_length_scale(torch.tensor([0, 15, 16, 255, 4095]), 16)
    expected = [1.0, 1.0, math.log(17) / math.log(16), 2.0, 3.0]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))


def model(pe: str, method: str = "none", train_length: int = 16, **params) -> GPT:
    torch.manual_seed(0)
    ext = ExtensionConfig(method, params.pop("factor", 1.0), train_length, params)
    cfg = ModelConfig(
        vocab_size=23,
        d_model=32,
        n_layers=2,
        n_heads=4,
        pe=pe,
        extension=ext,
        train_length=train_length,
    )
    net = GPT(cfg).eval()
    with torch.no_grad():  # sharper attention than the init's, so position changes show
        for block in net.blocks:
            block.attn.qkv.weight.mul_(20)
    return net


def test_self_extend_with_group_one_is_plain_rope():
    idx = torch.randint(0, 23, (2, 90))
    plain = model("rope")(idx)["logits"]
    grouped = model("rope", "self_extend", window=4, group=1)(idx)["logits"]
    torch.testing.assert_close(grouped, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pe", ["none", "alibi", "rope", "sinusoidal"])
def test_log_scaling_is_plain_within_l0_and_scales_queries_past_it(pe):
    idx = torch.randint(0, 23, (1, 64))
    plain, scaled = model(pe)(idx)["logits"], model(pe, "logn")(idx)["logits"]
    torch.testing.assert_close(scaled[:, :16], plain[:, :16], rtol=1e-5, atol=1e-5)
    assert (scaled[:, 16:] - plain[:, 16:]).abs().max() > 1e-4


@pytest.mark.parametrize(
    "pe,method,params",
    [
        ("rope", "self_extend", {"window": 4, "group": 3}),
        ("rope", "rerope", {"window": 6}),
        ("rope", "rerope", {"window": 6, "leaky_k": 3.0, "logn": True}),
        ("p_rope", "self_extend", {"window": 5, "group": 2, "logn": True}),
        ("none", "logn", {}),
        ("alibi", "logn", {}),
        ("rope", "logn", {}),
    ],
)
def test_generation_with_the_kv_cache_equals_recomputation(pe, method, params):
    net = model(pe, method, **params)
    idx = torch.randint(0, 23, (2, 60))
    full = net(idx)["logits"]
    cache = net.new_cache()
    steps = [net(idx[:, :20], cache=cache)["logits"]]  # a prompt past the window and the group
    steps += [net(idx[:, t : t + 1], cache=cache)["logits"] for t in range(20, 60)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)


def test_rotate_at_integer_positions_is_the_table_rotation():
    pe = rope()
    q, k, _ = qkv(40)
    pos = torch.arange(40)
    rq, rk = pe.rotate(q.float(), k.float(), pos, pos, pe.prepare(40, torch.device("cpu")))
    torch.testing.assert_close(pe.rotate_at(q.float(), pos), rq)
    torch.testing.assert_close(pe.rotate_at(k.float(), pos), rk)


@pytest.mark.parametrize(
    "method,params,message",
    [
        (
            "self_extend",
            {"window": 16},
            "extension.window must be in [1, 15] (below the training length 16), got 16",
        ),
        ("rerope", {"window": 0}, "extension.window must be a positive integer"),
        ("rerope", {"leaky_k": 1}, "extension.leaky_k must be a finite number > 1 or null"),
        ("self_extend", {"group": 0}, "extension.group must be a positive integer"),
    ],
)
def test_bad_params_are_one_line_errors(method, params, message):
    with pytest.raises(PosexpError, match=re.escape(message)):
        ExtensionConfig(method, 1.0, 16, params).attention_plan()


@pytest.mark.parametrize("method", ["self_extend", "rerope", "logn"])
def test_no_run_trains_with_a_training_free_method(method):
    assert get_extension(method).training_free
    with pytest.raises(PosexpError, match=f"extension '{method}' is training-free"):
        RunConfig.from_dict(run_config(f"extension={method}"))
