"""The model's attention under every RoPE extension equals an explicit reference computation.

The reference shares no code with posexp: inverse frequencies come from docs/maths.md §3's closed
forms written out here with Python floats, each (i, i + d/2) pair is rotated as a complex number
times the attention factor, and attention is softmax(QKᵀ/√d + causal mask) V.
"""

from __future__ import annotations

import cmath
import math

import pytest
import torch

from posexp.extension import ExtensionConfig
from posexp.model import GPT, ModelConfig

HEAD_DIM, HEADS, L0, BASE = 16, 2, 16, 10000.0


def theta(base: float = BASE, d: int = HEAD_DIM) -> list[float]:
    return [base ** (-2 * i / d) for i in range(d // 2)]


def reference_frequencies(method: str, s: float, length: int) -> tuple[list[float], float]:
    """docs/maths.md §3, one method at a time."""
    d = HEAD_DIM
    if method == "none":
        return theta(), 1.0
    if method == "pi":
        return [t / s for t in theta()], 1.0
    if method == "ntk":
        return theta(BASE * s ** (d / (d - 2))), 1.0
    if method == "dynamic_ntk":
        current = max(length, L0)
        if current <= L0:
            return theta(), 1.0
        return theta(BASE * ((s * current / L0) - (s - 1)) ** (d / (d - 2))), 1.0
    if method == "yarn":

        def c(r: float) -> float:
            return d * math.log(L0 / (2 * math.pi * r)) / (2 * math.log(BASE))

        lo = min(max(math.floor(c(32)), 0), d - 1)
        hi = min(max(math.ceil(c(1)), 0), d - 1)
        if lo == hi:
            hi += 0.001
        out = []
        for i, t in enumerate(theta()):
            ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
            out.append((t / s) * ramp + t * (1 - ramp))
        return out, (0.1 * math.log(s) + 1 if s > 1 else 1.0)
    if method == "llama3":
        lff, hff = 1.0, 4.0
        out = []
        for t in theta():
            wavelen = 2 * math.pi / t
            if wavelen < L0 / hff:
                out.append(t)
            elif wavelen > L0 / lff:
                out.append(t / s)
            else:
                sm = (L0 / wavelen - lff) / (hff - lff)
                out.append((1 - sm) * t / s + sm * t)
        return out, 1.0
    raise AssertionError(method)


def rotate(x: torch.Tensor, inv_freq: list[float], af: float) -> torch.Tensor:
    """Rotate pairs (i, i + d/2) of x (T, d) at positions 0..T-1, scaled by af."""
    T, d = x.shape
    out = torch.empty(T, d, dtype=torch.float64)
    for m in range(T):
        for i, f in enumerate(inv_freq):
            z = complex(x[m, i], x[m, i + d // 2]) * af * cmath.exp(1j * m * f)
            out[m, i], out[m, i + d // 2] = z.real, z.imag
    return out


@torch.no_grad()
def reference_attention(attn, x: torch.Tensor, inv_freq: list[float], af: float) -> torch.Tensor:
    T, C = x.shape
    qkv = (x.double() @ attn.qkv.weight.double().T).split(C, dim=1)
    heads = []
    for h in range(HEADS):
        q, k, v = (t[:, h * HEAD_DIM : (h + 1) * HEAD_DIM] for t in qkv)
        q, k = rotate(q, inv_freq, af), rotate(k, inv_freq, af)
        scores = q @ k.T / math.sqrt(HEAD_DIM)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        heads.append(scores.softmax(-1) @ v)
    return torch.cat(heads, dim=1) @ attn.out.weight.double().T


@pytest.mark.parametrize("method", ["none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3"])
@pytest.mark.parametrize("length", [12, 40])  # below and past the training length L0 = 16
def test_model_attention_matches_reference(method, length):
    s = 4.0
    ext = ExtensionConfig(method, s, L0)
    model = GPT(
        ModelConfig(
            vocab_size=7,
            d_model=HEAD_DIM * HEADS,
            n_layers=1,
            n_heads=HEADS,
            pe="rope",
            extension=ext,
            train_length=L0,
        )
    )
    attn = model.blocks[0].attn
    x = torch.randn(length, HEAD_DIM * HEADS)
    tables = model.pe.prepare(length, x.device)  # what GPT.forward hands every layer
    with torch.no_grad():
        fast, _ = attn(x[None], model.pe, torch.arange(length), tables)  # SDPA path
        explicit, _ = attn(x[None], model.pe, torch.arange(length), tables, need_weights=True)
    inv_freq, af = reference_frequencies(method, s, length)
    expected = reference_attention(attn, x, inv_freq, af).float()
    torch.testing.assert_close(fast[0], expected, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(explicit[0], expected, atol=2e-5, rtol=1e-4)


def test_extensions_differ_from_none_past_training_length():
    # Guards the test above against a reference that silently ignores the method.
    ref = {
        m: reference_frequencies(m, 4.0, 40)
        for m in ("none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3")
    }
    for method, (inv_freq, af) in ref.items():
        if method != "none":
            assert inv_freq != ref["none"][0] or af != 1.0, method
