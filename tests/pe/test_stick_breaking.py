"""Stick-breaking attention against the product formula written out pair by pair, worked numbers,
its leftover, chunking, bf16, gradients, the KV cache and an exact resume."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.pe import PEContext, build_pe
from posexp.pe.stick_breaking import stick_breaking_attention
from tests.helpers import run_config


def qkv(T: int, d: int = 4, heads: int = 2, batch: int = 1, scale: float = 1.0, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, heads, T, d, generator=g, dtype=torch.float64) * scale for _ in "qkv"
    ]


def product_weights(q, k, attend_current: bool) -> list[list[float]]:
    """A_ij = β_ij Π_{j<m≤last} (1 − β_im), β = σ(q·k/√d), one head, in plain Python floats;
    last = i when the query's own key takes part, else i − 1."""
    T, d = q.shape

    def sigmoid_score(i: int, j: int) -> float:
        dot = sum(float(a) * float(b) for a, b in zip(q[i], k[j], strict=True))
        return 1 / (1 + math.exp(-dot / math.sqrt(d)))

    beta = [[sigmoid_score(i, j) for j in range(T)] for i in range(T)]
    A = [[0.0] * T for _ in range(T)]
    for i in range(T):
        last = i if attend_current else i - 1
        for j in range(last + 1):
            p = beta[i][j]
            for m in range(j + 1, last + 1):
                p *= 1 - beta[i][m]
            A[i][j] = p
    return A


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("leftover", ["self", "drop"])
def test_weights_and_output_equal_the_product_formula(leftover, attend_current):
    q, k, v = qkv(6, scale=1.5)
    pos = torch.arange(6)
    y, w = stick_breaking_attention(q, k, v, pos, pos, leftover, attend_current, need_weights=True)
    for h in range(2):
        A = product_weights(q[0, h], k[0, h], attend_current)
        for i in range(6):
            row = list(A[i])
            if leftover == "self":
                row[i] += 1 - sum(A[i])  # what no key took goes to the query's own value
            torch.testing.assert_close(w[0, h, i], torch.tensor(row, dtype=torch.float64))
            out = [sum(row[j] * float(v[0, h, j, c]) for j in range(6)) for c in range(4)]
            torch.testing.assert_close(y[0, h, i], torch.tensor(out, dtype=torch.float64))


def test_worked_example():
    # Head dim 1, so z_ij = q_i k_j: the last query (q = 1) sees keys with z = ln 3 (β = 3/4),
    # 0 (β = 1/2) and, itself, ln 3. Without the own key: key 1 takes 1/2, key 0 takes
    # 3/4 · 1/2 = 3/8, 1/8 is left. With it: 3/4, then 1/2 · 1/4 = 1/8, then 3/4 · 1/2 · 1/4
    # = 3/32, and 1/4 · 1/2 · 1/4 = 1/32 is left.
    q = torch.tensor([0.0, 0.0, 1.0]).view(1, 1, 3, 1)
    k = torch.tensor([math.log(3), 0.0, math.log(3)]).view(1, 1, 3, 1)
    v = torch.tensor([1.0, 10.0, 100.0]).view(1, 1, 3, 1)
    pos = torch.arange(3)
    y, w = stick_breaking_attention(q, k, v, pos, pos, "drop", need_weights=True)
    torch.testing.assert_close(w[0, 0, 2], torch.tensor([3 / 8, 1 / 2, 0.0]))
    torch.testing.assert_close(y[0, 0, 2, 0], torch.tensor(3 / 8 + 5.0))
    y, w = stick_breaking_attention(q, k, v, pos, pos, "self", need_weights=True)
    torch.testing.assert_close(w[0, 0, 2], torch.tensor([3 / 8, 1 / 2, 1 / 8]))
    torch.testing.assert_close(y[0, 0, 2, 0], torch.tensor(3 / 8 + 5.0 + 12.5))
    # The first query sees no key: under self it is its own value, under drop zero.
    torch.testing.assert_close(y[0, 0, 0, 0], torch.tensor(1.0))
    _, w = stick_breaking_attention(q, k, v, pos, pos, "drop", True, need_weights=True)
    torch.testing.assert_close(w[0, 0, 2], torch.tensor([3 / 32, 1 / 8, 3 / 4]))
    _, w = stick_breaking_attention(q, k, v, pos, pos, "self", True, need_weights=True)
    torch.testing.assert_close(w[0, 0, 2], torch.tensor([3 / 32, 1 / 8, 3 / 4 + 1 / 32]))


@pytest.mark.parametrize("attend_current", [False, True])
def test_rows_sum_to_at_most_one_and_self_fills_them(attend_current):
    q, k, v = qkv(40, scale=3.0, batch=2)
    pos = torch.arange(40)
    y, w = stick_breaking_attention(q, k, v, pos, pos, "drop", attend_current, True)
    sums = w.sum(-1)
    assert (sums <= 1 + 1e-12).all() and (sums >= 0).all()
    assert (w.triu(0 if not attend_current else 1) == 0).all()  # masked: exactly zero
    torch.testing.assert_close(y, w @ v)  # drop: the weights are all the output holds
    y_self, w_self = stick_breaking_attention(q, k, v, pos, pos, "self", attend_current, True)
    torch.testing.assert_close(w_self.sum(-1), torch.ones_like(sums))
    eye = torch.eye(40, dtype=w.dtype)
    torch.testing.assert_close(w_self, w + (1 - sums)[..., None] * eye)
    torch.testing.assert_close(y_self, y + (1 - sums)[..., None] * v)


def test_chunked_equals_one_chunk_and_never_holds_the_square():
    q, k, v = (t.float() for t in qkv(300, batch=2, scale=2.0))
    pos = torch.arange(300)
    one = stick_breaking_attention(q, k, v, pos, pos, need_weights=True, chunk=10**6)
    for chunk in (1, 7, 128):
        got = stick_breaking_attention(q, k, v, pos, pos, need_weights=True, chunk=chunk)
        torch.testing.assert_close(got, one, rtol=1e-5, atol=1e-6)

    class Largest(TorchDispatchMode):
        """The most elements any op returns."""

        most = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    Largest.most = max(Largest.most, t.numel())
            return out

    with Largest():
        stick_breaking_attention(q, k, v, pos, pos, chunk=10**6)
    assert Largest.most == 2 * 2 * 300 * 300  # one chunk: the whole square, as the mode sees
    Largest.most = 0
    with Largest():
        stick_breaking_attention(q, k, v, pos, pos, chunk=64)
    assert Largest.most <= 2 * 2 * 64 * 300  # B·H·chunk·L at most: never the square


@pytest.mark.parametrize("attend_current", [False, True])
def test_decoding_over_cached_keys_equals_the_full_rows(attend_current):
    q, k, v = qkv(20, batch=2)
    pos = torch.arange(20)
    full, w_full = stick_breaking_attention(q, k, v, pos, pos, "self", attend_current, True)
    # The last 5 queries over all 20 keys (a KV cache), and one query alone.
    for n in (5, 1):
        y, w = stick_breaking_attention(
            q[:, :, -n:], k, v, pos[-n:], pos, "self", attend_current, True
        )
        torch.testing.assert_close(y, full[:, :, -n:])
        torch.testing.assert_close(w, w_full[:, :, -n:])
    # Positions per row (B, T) give what shared ones do.
    rows = pos.expand(2, 20)
    torch.testing.assert_close(
        stick_breaking_attention(q, k, v, rows, rows, "self", attend_current)[0], full
    )


@pytest.mark.parametrize(("leftover", "attend_current"), [("drop", True), ("self", False)])
def test_model_cache_and_weights(leftover, attend_current):
    cfg = ModelConfig(
        vocab_size=40,
        d_model=32,
        n_layers=2,
        n_heads=4,
        pe="stick_breaking",
        pe_params={"leftover": leftover, "attend_current": attend_current},
    )
    model = GPT(cfg).eval()
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight.mul_(10)  # sharper than at init
        idx = torch.randint(0, 40, (3, 20))
        out = model(idx, need_weights=True)
        cache = model.new_cache()
        steps = [model(idx[:, :8], cache=cache)["logits"]]
        steps += [model(idx[:, t : t + 1], cache=cache)["logits"] for t in range(8, 20)]
    torch.testing.assert_close(torch.cat(steps, 1), out["logits"], rtol=1e-5, atol=1e-5)
    w = out["attention"][0]
    assert w.shape == (3, 4, 20, 20) and (w.triu(1) == 0).all()
    sums = w.sum(-1)
    if leftover == "self":
        torch.testing.assert_close(sums, torch.ones_like(sums))
    else:
        assert (sums <= 1 + 1e-6).all() and sums.min() < 0.99


def test_bf16_autocast_is_close_to_fp32_and_large_scores_stay_finite():
    q, k, v = (t.float() for t in qkv(200, batch=2, d=16, scale=1.0))
    pos = torch.arange(200)
    fp32, _ = stick_breaking_attention(q, k, v, pos, pos)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16, _ = stick_breaking_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), pos, pos)
    assert bf16.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.float(), fp32, rtol=0.05, atol=0.05)
    # Scores in the hundreds: σ saturates, the log-space sums do not overflow.
    big = [t.float().requires_grad_() for t in qkv(50, d=16, scale=8.0)]
    pos = torch.arange(50)
    y, w = stick_breaking_attention(*big, pos, pos, "drop", need_weights=True)
    y.sum().backward()
    assert torch.isfinite(y).all() and all(torch.isfinite(t.grad).all() for t in big)
    q64, k64 = (t[0, 0].detach().double() for t in big[:2])
    exact = torch.tensor(product_weights(q64, k64, False), dtype=torch.float64)
    torch.testing.assert_close(w[0, 0].double(), exact, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("leftover", ["self", "drop"])
def test_gradcheck(leftover, attend_current):
    q, k, v = (t.requires_grad_() for t in qkv(5, d=3, heads=1))
    pos = torch.arange(5)
    assert torch.autograd.gradcheck(
        lambda q, k, v: stick_breaking_attention(
            q, k, v, pos, pos, leftover, attend_current, chunk=2
        )[0],
        (q, k, v),
    )


def test_settings_are_checked():
    assert RunConfig.from_dict(
        run_config("pe=stick_breaking", "pe.leftover=drop").to_dict()
    ).pe.params == {"leftover": "drop", "attend_current": False}
    with pytest.raises(PosexpError, match=r"^unknown pe.leftover 'keep'; allowed: drop, self$"):
        run_config("pe=stick_breaking", "pe.leftover=keep")
    with pytest.raises(PosexpError, match=r"^pe.attend_current must be true or false, got 1$"):
        run_config("pe=stick_breaking", "pe.attend_current=1")
    with pytest.raises(PosexpError, match="unknown pe.leftover"):
        build_pe("stick_breaking", PEContext(8, 2, 4, 16), leftover="all")
    assert list(build_pe("stick_breaking", PEContext(8, 2, 4, 16)).parameters()) == []
