"""StreamingLLM, LM-Infinite, Dual Chunk Attention and STRING against direct constructions.

The reference lists, pair by pair in plain Python and from each paper's definition, which keys a
query sees and the relative distance it scores them at, then scores q_i against k_j rotated back
by that distance (RoPE's score depends only on the difference of the two positions). Nothing of
the plan's classes or position functions is shared with it.
"""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.model import GPT, ModelConfig
from posexp.model.attention import AttentionCall, attend
from tests.extension.test_training_free import D, qkv, rope, rotate_by

HIDDEN = None  # a key the query does not see


def reference(q, k, v, distance) -> torch.Tensor:
    """softmax over the seen keys j <= i of q_i · R(-r_ij) k_j / √D, r_ij HIDDEN: unseen."""
    T = q.shape[2]
    seen = torch.tensor(
        [[r is not HIDDEN and j <= i for j, r in enumerate(row)] for i, row in enumerate(distance)]
    )
    r = torch.tensor(
        [[0.0 if x is HIDDEN else float(x) for x in row] for row in distance], dtype=torch.float64
    )
    k_back = rotate_by(k[:, :, None, :, :], -r)
    scores = (q[:, :, :, None, :] * k_back).sum(-1) / math.sqrt(D)
    assert seen.shape == (T, T)
    return scores.masked_fill(~seen, float("-inf")).softmax(-1) @ v


def streaming_distance(i: int, j: int, sinks: int, window: int):
    """Xiao et al.: the cache holds the first S tokens and the last W (the query included); the
    positions are the slots of that cache, in order."""
    cache = sorted({t for t in range(i + 1) if t < sinks or i - t < window})
    return cache.index(i) - cache.index(j) if j in cache else HIDDEN


def lm_infinite_distance(i: int, j: int, window: int, cap: int, sinks: int):
    """Han et al.: local keys at their distance, the first G at min(cap, i), others unseen."""
    if i - j < window:
        return i - j
    return min(cap, i) if j < sinks else HIDDEN


def dca_distance(i: int, j: int, chunk: int, local: int) -> int:
    """An et al. (ChunkLlama): P_k = j mod c; P_q = i mod c (same chunk), min(i mod c + c, s)
    (the chunk before), s (older chunks); c = s - w."""
    c = chunk - local
    if i // c == j // c:
        pq = i % c
    elif j // c == i // c - 1:
        pq = min(i % c + c, chunk)
    else:
        pq = chunk
    return pq - j % c


def string_distance(i: int, j: int, shift: int, local: int) -> int:
    """An et al. (STRING): d below S kept, d - S + W from S on."""
    d = i - j
    return d if d < shift else d - shift + local


CASES = [
    ("streaming_llm", dict(sinks=2, window=6), lambda i, j: streaming_distance(i, j, 2, 6)),
    ("streaming_llm", dict(sinks=0, window=5), lambda i, j: streaming_distance(i, j, 0, 5)),
    (
        "lm_infinite",
        dict(window=8, cap=8, sinks=3),
        lambda i, j: lm_infinite_distance(i, j, 8, 8, 3),
    ),
    (
        "lm_infinite",
        dict(window=5, cap=12, sinks=1),
        lambda i, j: lm_infinite_distance(i, j, 5, 12, 1),
    ),
    ("dca", dict(chunk=12, local=2), lambda i, j: dca_distance(i, j, 12, 2)),
    ("dca", dict(chunk=9, local=3), lambda i, j: dca_distance(i, j, 9, 3)),
    ("string", dict(shift=10, local=4), lambda i, j: string_distance(i, j, 10, 4)),
    ("string", dict(shift=6, local=6), lambda i, j: string_distance(i, j, 6, 6)),
]


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize(("method", "params", "distance"), CASES)
def test_each_method_matches_its_papers_construction(method, params, distance, need_weights):
    T = 150  # crosses the kernel's query blocks (128)
    q, k, v = qkv(T, seed=2)
    pe = rope(method, train_length=16, **params)
    pos = torch.arange(T)
    call = AttentionCall(
        q, k, v, pos, pos, pe, pe.ctx.extension.attention_plan(), need_weights=need_weights
    )
    got, weights = attend(call)
    dist = [[distance(i, j) if j <= i else HIDDEN for j in range(T)] for i in range(T)]
    torch.testing.assert_close(got, reference(q, k, v, dist), rtol=1e-6, atol=1e-6)
    if need_weights:
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, T, dtype=torch.float64))


def test_worked_distances():
    # DCA, L0 16: s 12, w 2, c 10. i 25: key 22 -> 3 (true), key 19 -> 12 - 9 = 3, key 3 -> 9;
    # i 21, key 10 -> 11 (the successive chunk, capped: min(1 + 10, 12) - 0).
    assert [dca_distance(25, j, 12, 2) for j in (22, 19, 3)] == [3, 3, 9]
    assert dca_distance(21, 10, 12, 2) == 11
    # LM-Infinite, window 4, one global key: i 9 sees {0, 6, 7, 8, 9}, key 0 at distance 4.
    seen = [j for j in range(10) if lm_infinite_distance(9, j, 4, 4, 1) is not HIDDEN]
    assert seen == [0, 6, 7, 8, 9] and lm_infinite_distance(9, 0, 4, 4, 1) == 4
    # StreamingLLM (the paper's §3.2): cache [0,1,2,3,6,7,8,9] for token 9 -> slots 0..7.
    assert streaming_distance(9, 3, 4, 4) == 4 and streaming_distance(9, 6, 4, 4) == 3
    assert streaming_distance(9, 5, 4, 4) is HIDDEN
    # STRING S 10, W 4: distance 9 stays 9, distance 10 becomes 4, 20 becomes 14.
    assert [string_distance(t, 0, 10, 4) for t in (9, 10, 20)] == [9, 4, 14]


@pytest.mark.parametrize(
    ("method", "params", "untouched"),
    [
        ("streaming_llm", dict(sinks=2, window=10), 12),  # L <= S + W: nothing evicted
        ("lm_infinite", dict(window=12, cap=12, sinks=2), 12),  # L <= W
        ("dca", dict(chunk=14, local=2), 12),  # L <= c: one chunk
        ("string", dict(shift=12, local=4), 12),  # L <= S: no distance shifted
    ],
)
def test_each_method_equals_none_where_its_settings_leave_attention_untouched(
    method, params, untouched
):
    def model(ext: ExtensionConfig) -> GPT:
        torch.manual_seed(0)
        cfg = ModelConfig(
            vocab_size=30,
            d_model=32,
            n_layers=2,
            n_heads=2,
            pe="rope",
            train_length=16,
            extension=ext,
        )
        m = GPT(cfg).eval()
        with torch.no_grad():  # sharp attention, so hiding or moving a key shows in the logits
            for block in m.blocks:
                block.attn.qkv.weight.mul_(20)
        return m

    idx = torch.randint(0, 30, (2, untouched))
    plain = model(ExtensionConfig())(idx)["logits"]
    with_method = model(ExtensionConfig(method, 1.0, 16, params))
    torch.testing.assert_close(with_method(idx)["logits"], plain, rtol=1e-5, atol=1e-5)
    # One token more and it acts (a key is hidden or scored at another distance).
    longer = torch.randint(0, 30, (2, 3 * untouched))
    assert not torch.allclose(
        with_method(longer)["logits"], model(ExtensionConfig())(longer)["logits"], atol=1e-4
    )


def test_kv_cache_decoding_with_a_method_equals_the_full_forward():
    torch.manual_seed(0)
    ext = ExtensionConfig("streaming_llm", 1.0, 16, dict(sinks=2, window=5))
    m = GPT(
        ModelConfig(
            vocab_size=30, d_model=32, n_layers=2, n_heads=2, train_length=16, extension=ext
        )
    ).eval()
    idx = torch.randint(0, 30, (2, 20))
    full = m(idx)["logits"]
    cache = m.new_cache()
    steps = [m(idx[:, :6], cache=cache)["logits"]]
    steps += [m(idx[:, t : t + 1], cache=cache)["logits"] for t in range(6, 20)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def test_string_sizes_its_shift_by_the_evaluated_length():
    # L0 64, W 4: at 2x (L 128) S = 128 - 64 + 4 = 68 -> capped at L0 - 1 = 63; at 1.5x (96)
    # S = 36 (>= 64 // 3 = 21); at 1x S = 21.
    from posexp.extension.methods.string import default_shift

    assert [default_shift(64, 4, L) for L in (64, 96, 128)] == [21, 36, 63]


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("dca", dict(chunk=8, local=4), "extension.local must be below chunk / 2"),
        ("dca", dict(chunk=16), r"chunk must be in \[1, 15\]"),
        ("string", dict(shift=4, local=6), r"extension.local must be in \[1, shift = 4\]"),
        ("lm_infinite", dict(cap=40), r"cap must be in \[1, 16\]"),
        ("streaming_llm", dict(sinks=-1), "sinks"),
    ],
)
def test_bad_settings_are_one_line(method, params, message):
    with pytest.raises(PosexpError, match=message):
        ExtensionConfig(method, 1.0, 16, params).attention_plan()


@pytest.mark.parametrize(
    ("method", "params", "distance"),
    [
        ("string", dict(shift=10, local=4), lambda i, j: string_distance(i, j, 10, 4)),
        ("rerope", dict(window=8), lambda i, j: i - j if i - j < 8 else 8),
    ],
)
def test_a_layer_window_and_sinks_hide_pairs_on_top_of_a_method(method, params, distance):
    # attention.window W = 20 with 2 sinks: pairs farther than W hidden unless j < 2, the others
    # scored as the method says.
    T, W, S = 150, 20, 2
    q, k, v = qkv(T, seed=4)
    pe = rope(method, train_length=16, **params)
    pos = torch.arange(T)
    plan = pe.ctx.extension.attention_plan()
    sink = torch.tensor([0.4, -0.7], dtype=torch.float64)
    got, _ = attend(AttentionCall(q, k, v, pos, pos, pe, plan, window=W, sinks=S))
    with_sink, _ = attend(
        AttentionCall(q, k, v, pos, pos, pe, plan, window=W, sinks=S, sink_logit=sink)
    )
    dist = [
        [distance(i, j) if j <= i and (i - j < W or j < S) else HIDDEN for j in range(T)]
        for i in range(T)
    ]
    torch.testing.assert_close(got, reference(q, k, v, dist), rtol=1e-6, atol=1e-6)
    # A sink logit on top: the output times σ(LSE - s) per head (the extra logit's mass).
    scale = torch.stack([got_scale(q, k, dist, h, sink[h]) for h in range(2)], dim=1)
    torch.testing.assert_close(with_sink, got * scale[..., None], rtol=1e-6, atol=1e-6)


def got_scale(q, k, dist, h, s):
    """σ(LSE_j z_ij - s) for head h, z over the seen keys at the reference's distances."""
    r = torch.tensor(
        [[0.0 if x is HIDDEN else float(x) for x in row] for row in dist], dtype=torch.float64
    )
    seen = torch.tensor([[x is not HIDDEN for x in row] for row in dist])
    k_back = rotate_by(k[:, h, None, :, :], -r)
    z = (q[:, h, :, None, :] * k_back).sum(-1) / math.sqrt(D)
    return torch.sigmoid(z.masked_fill(~seen, float("-inf")).logsumexp(-1) - s)


def test_blockwise_attention_keeps_the_layers_window_within_each_block():
    T, W = 40, 5
    q, k, v = qkv(T, seed=5)
    pe = rope("blockwise", train_length=16)  # blocks of 8: a query sees its block and the last
    pos = torch.arange(T)
    plan = pe.ctx.extension.attention_plan()
    # Blockwise keeps the positions: the model rotates q and k before attention.
    qr, kr = rotate_by(q, pos.double()), rotate_by(k, pos.double())
    got, _ = attend(AttentionCall(qr, kr, v, pos, pos, pe, plan, window=W))
    dist = [
        [i - j if j <= i and i - j < W and j // 8 >= i // 8 - 1 else HIDDEN for j in range(T)]
        for i in range(T)
    ]
    torch.testing.assert_close(got, reference(q, k, v, dist), rtol=1e-6, atol=1e-6)
