"""posexp's CPU kernel for bias attention: SDPA's numbers at every length and head size, every
bias PE through the model, and FlexAttention or SDPA wherever it cannot run."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from posexp.kernels import cpp_bias, flex
from posexp.kernels.choice import KernelChoice
from posexp.model import GPT, ModelConfig
from posexp.pe import PE_REGISTRY, PEContext, build_pe

SDPA = KernelChoice(bias="sdpa")  # the reference the kernels are compared against

BIAS_PES = sorted(name for name, cls in PE_REGISTRY.items() if cls.kind == "bias")


def _explicit(q, k, v, bias):
    """SDPA with the bias (H, T, T) written out and the causal mask."""
    pos = torch.arange(q.shape[2])
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias.masked_fill(pos > pos[:, None], -math.inf)
    )


def _fire_like(heads: int, units: int, length: int, threshold: float):
    """A random FIRE-shaped bias: tables, row scales, and a piecewise-linear MLP per head."""
    d = torch.arange(length, dtype=torch.float32)
    log_distance = torch.log(0.1 * d + 1)
    row_scale = 1 / torch.log(0.1 * d.clamp(min=threshold) + 1)
    piecewise = (
        torch.randn(heads),
        torch.randn(heads),
        torch.rand(units),
        torch.randn(heads, units),
    )
    u = log_distance[(d[:, None] - d[None, :]).clamp(min=0).long()] * row_scale[:, None]
    intercept, slope, kinks, gains = piecewise
    bias = intercept[:, None, None] + slope[:, None, None] * u
    bias = bias + (gains[:, :, None, None] * torch.relu(u - kinks[:, None, None])).sum(1)
    return log_distance, row_scale, piecewise, bias


@torch.no_grad()
@pytest.mark.parametrize("width", [8, 16])  # AVX2's and AVX-512's floats per vector
def test_the_kernel_equals_sdpa_at_every_length_and_head_size(width):
    # Every length from 1 to 300 crosses the kernel's 32-query blocks and 128-key tiles at
    # every offset; two batch rows of 3 heads check which head each row reads.
    wrong = []
    # The width changes the key loops only, which every head size shares: 16 floats at one.
    for D in cpp_bias.HEAD_DIMS[:3] if width == 8 else (16,):  # 8, 16, 32
        torch.manual_seed(D)
        slopes = torch.rand(3)
        table = -slopes[:, None] * torch.arange(300.0)
        psi, scale, piecewise, fire_bias = _fire_like(3, 6, 300, threshold=40.0)
        d = torch.arange(300)
        table_bias = table[:, (d[:, None] - d[None, :]).clamp(min=0)]
        for T in range(1, 301):
            q, k, v = (torch.randn(2, 3, T, D) for _ in range(3))
            got = cpp_bias.causal_attention(q, k, v, table, vector_floats=width)
            if (got - _explicit(q, k, v, table_bias[:, :T, :T])).abs().max() > 1e-5:
                wrong.append(("table", D, T))
            got = cpp_bias.causal_attention(q, k, v, psi, scale, piecewise, vector_floats=width)
            if (got - _explicit(q, k, v, fire_bias[:, :T, :T])).abs().max() > 1e-5:
                wrong.append(("piecewise", D, T))
    assert not wrong, f"(bias, head dim, length) that differ from SDPA: {wrong}"


def _cpp_model_agrees_with_sdpa(kernel: str, perturb: bool, **cfg) -> None:
    """A model on attention=cpp gives SDPA's logits over 333 tokens, through ``kernel``."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=100, n_layers=2, train_length=64, **cfg)
    cpp = GPT(ModelConfig(**cfg), KernelChoice(bias="cpp"))
    sdpa = GPT(ModelConfig(**cfg), KernelChoice(bias="sdpa"))
    if perturb:
        with torch.no_grad():
            for p in cpp.pe.parameters():  # a trained-looking encoding, not its init
                p.add_(0.3 * torch.randn_like(p))
    sdpa.load_state_dict(cpp.state_dict())
    x = torch.randint(0, 100, (2, 333))
    calls = []
    real = getattr(cpp_bias, kernel)
    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpp_bias, kernel, lambda *a: calls.append(1) or real(*a))
        assert (cpp.eval()(x)["logits"] - sdpa.eval()(x)["logits"]).abs().max() < 1e-4
    assert calls


@pytest.mark.parametrize("name", BIAS_PES)
@pytest.mark.parametrize("D", [16, 64])
def test_models_agree_with_sdpa(name, D):
    # FIRE is evaluated past its threshold (64), where its row scale falls with the query; T5
    # takes the kernel though posexp/model/near_far.py could run it (the kernel is faster).
    _cpp_model_agrees_with_sdpa("causal_attention", True, d_model=2 * D, n_heads=2, pe=name)


@pytest.mark.parametrize("name", BIAS_PES)
def test_a_distance_bias_is_the_bias_at_every_pair(name):
    torch.manual_seed(1)
    pe = build_pe(name, PEContext(d_model=64, n_heads=4, head_dim=16, train_length=32))
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.randn_like(p))
        pos = torch.arange(100)
        want = pe.bias(pos, pos, torch.float32)
        got = pe.distance_bias(100, torch.device("cpu"))
        d = (pos[:, None] - pos[None, :]).clamp(min=0)
        if got.piecewise is None:
            bias = got.table[:, d]
        else:
            intercept, slope, kinks, gains = got.piecewise
            u = got.table[d] * got.row_scale[:100, None]  # tables may be longer
            bias = intercept[:, None, None] + slope[:, None, None] * u
            bias = bias + (gains[:, :, None, None] * torch.relu(u - kinks[:, None, None])).sum(1)
    lower = pos[:, None] >= pos[None, :]
    assert (bias - want)[:, lower].abs().max() < 1e-5


@torch.no_grad()
@pytest.mark.parametrize("where", ["q", "k"])
def test_a_nan_reaches_every_query_that_sees_it(where):
    # A diverged model must not score as a finite one: a NaN in query 150's or key 150's vector
    # makes that query's (or every later query's) output NaN, and no other.
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 200, 16) for _ in range(3))
    table = -torch.rand(2)[:, None] * torch.arange(200.0)
    pos = torch.arange(200)
    want = _explicit(q, k, v, table[:, (pos[:, None] - pos[None, :]).clamp(min=0)])
    {"q": q, "k": k}[where][0, 1, 150, 3] = float("nan")
    got = cpp_bias.causal_attention(q, k, v, table)
    nan_rows = (pos == 150) if where == "q" else (pos >= 150)
    assert got[0, 1, nan_rows].isnan().all() and not got[0, 1, ~nan_rows].isnan().any()
    assert (got[0, 0] - want[0, 0]).abs().max() < 1e-5
    assert (got[0, 1, pos < 150] - want[0, 1, pos < 150]).abs().max() < 1e-5


def test_bf16_inputs_run_in_fp32_and_come_back_in_bf16():
    torch.manual_seed(0)
    table = -torch.rand(4)[:, None] * torch.arange(200.0)
    q, k, v = (torch.randn(1, 4, 200, 16).bfloat16() for _ in range(3))
    with torch.no_grad():
        want = cpp_bias.causal_attention(q.float(), k.float(), v.float(), table)
        got = cpp_bias.causal_attention(q, k, v, table)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want.bfloat16())


def test_it_does_not_run_with_gradients_or_an_unbuilt_head_size():
    q = torch.randn(1, 2, 50, 16)
    table = torch.zeros(2, 50)
    assert cpp_bias.causal_attention(q, q, q, table) is None  # gradients on in this test
    with torch.no_grad():
        assert cpp_bias.causal_attention(q[..., :12], q[..., :12], q[..., :12], table) is None


def test_models_take_flex_where_the_kernel_cannot_be_built(monkeypatch):
    cfg = dict(vocab_size=60, d_model=64, n_layers=1, n_heads=4, pe="alibi", train_length=64)
    auto, sdpa = GPT(ModelConfig(**cfg)).eval(), GPT(ModelConfig(**cfg), SDPA).eval()
    sdpa.load_state_dict(auto.state_dict())
    monkeypatch.setattr(cpp_bias, "library", lambda vector_floats=None: None)
    calls = []
    real = flex.flex_causal_attention
    monkeypatch.setattr(flex, "flex_causal_attention", lambda *a: calls.append(1) or real(*a))
    x = torch.randint(0, 60, (1, 150))
    with torch.no_grad():
        assert (auto(x)["logits"] - sdpa(x)["logits"]).abs().max() < 1e-5
    assert calls


@pytest.mark.parametrize(
    ("backend", "device", "grad", "dropout", "expected"),
    [
        ("auto", "cpu", False, 0.0, True),  # CPU evaluation
        ("cpp", "cpu", False, 0.0, True),
        ("flex", "cpu", False, 0.0, False),  # flex asked for
        ("sdpa", "cpu", False, 0.0, False),
        ("auto", "cpu", True, 0.0, False),  # training: forward only
        ("auto", "cpu", False, 0.1, False),
        ("auto", "cuda", False, 0.0, False),
    ],
)
def test_when_the_kernel_is_tried(backend, device, grad, dropout, expected):
    assert cpp_bias.wanted(backend, torch.device(device), grad, dropout) is expected


@pytest.fixture
def fresh_build(tmp_path, monkeypatch):
    """library() with an empty cache of its own (and its in-process cache cleared around)."""
    monkeypatch.setenv("POSEXP_KERNEL_CACHE", str(tmp_path / "kernels"))
    cpp_bias.library.cache_clear()
    yield tmp_path / "kernels"
    cpp_bias.library.cache_clear()


def test_a_build_is_cached_and_reused(fresh_build, monkeypatch):
    assert cpp_bias.library() is not None
    built = list(fresh_build.glob("bias_attention-*.so"))
    assert len(built) == 1 and not list(fresh_build.glob(".build-*"))  # no half-written file
    cpp_bias.library.cache_clear()
    monkeypatch.setattr(cpp_bias, "_build", lambda *a: pytest.fail("built again"))
    assert cpp_bias.library() is not None


def test_a_cached_build_is_loaded_only_as_it_was_built(fresh_build):
    # A build cut to 20,000 bytes crashed every bias-PE evaluation with a bus error, and a
    # library without the kernel's symbol raised AttributeError: a cached build is loaded only
    # if its size and hash are those recorded at its build, and otherwise built again.
    compiler, flags = cpp_bias._compiler(), cpp_bias.FLAG_SETS[0]
    built = cpp_bias._build(compiler, flags, fresh_build, "k")
    assert isinstance(built, Path) and cpp_bias._verified(fresh_build, "k") == built
    whole = built.read_bytes()
    for damaged in (whole[:20_000], whole[:-1] + b"x", b"not a shared library"):
        built.write_bytes(damaged)
        assert cpp_bias._verified(fresh_build, "k") is None
    built.write_bytes(whole)
    (fresh_build / "bias_attention-k.json").write_text('{"file": "../elsewhere.so"}')
    assert cpp_bias._verified(fresh_build, "k") is None  # a record naming another file
    assert cpp_bias._try_load(fresh_build / "bias_attention-k.json").startswith("OSError")


def test_a_truncated_cached_build_is_built_again_not_mapped(fresh_build):
    # Another process (this one's loader would hand back the library it has by that name).
    assert cpp_bias.library() is not None
    [built] = fresh_build.glob("bias_attention-*.so")
    cut = built.with_suffix(".tmp")
    cut.write_bytes(built.read_bytes()[:20_000])
    cut.replace(built)  # a new file: this process has the old one mapped
    check = "from posexp.kernels import cpp_bias; assert cpp_bias.library() is not None"
    subprocess.run([sys.executable, "-c", check], check=True, timeout=300)  # was rc 135
    assert cpp_bias._verified(fresh_build, built.name.split("-")[1]) == built


def test_a_kernel_cache_that_is_a_file_falls_back_to_the_temp_dir(tmp_path, monkeypatch):
    # Was "FileExistsError" and FlexAttention, where an unwritable dir took the temp dir.
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("POSEXP_KERNEL_CACHE", str(tmp_path / "a_file"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    cpp_bias.library.cache_clear()
    try:
        assert cpp_bias.library() is not None
    finally:
        cpp_bias.library.cache_clear()
    assert list((tmp_path / "tmp" / "posexp-kernels").glob("bias_attention-*.so"))


def test_a_failed_build_warns_once_and_leaves_nothing(fresh_build, tmp_path, monkeypatch, caplog):
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(cpp_bias, "SOURCE", broken)
    with caplog.at_level(logging.WARNING, logger="posexp"):
        assert cpp_bias.library() is None
        assert cpp_bias.library() is None
    [record] = caplog.records
    assert "unavailable (building broken.cpp failed: " in record.getMessage()
    assert "using FlexAttention" in record.getMessage()
    assert not list(fresh_build.glob("*.so")) and not list(fresh_build.glob(".build-*"))


@torch.no_grad()
def test_the_forget_gate_equals_sdpa_with_its_bias():
    # FoX's c_i − c_j with c a falling running sum per (batch, head) row, as its gate makes it.
    torch.manual_seed(2)
    wrong = []
    for T in (1, 2, 31, 32, 33, 127, 128, 129, 300, 700):
        q, k, v = (torch.randn(2, 3, T, 16) for _ in range(3))
        c = F.logsigmoid(torch.randn(2, 3, T) + 2).cumsum(-1)
        pos = torch.arange(T)
        bias = (c[..., :, None] - c[..., None, :]).masked_fill(pos > pos[:, None], -math.inf)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        if (cpp_bias.causal_gated_attention(q, k, v, c) - want).abs().max() > 1e-5:
            wrong.append(T)
    assert not wrong, f"lengths where the gate differs from SDPA: {wrong}"


@pytest.mark.parametrize("gate", ["data", "bias"])
def test_fox_models_agree_with_sdpa(gate):
    _cpp_model_agrees_with_sdpa(
        "causal_gated_attention", False, d_model=64, n_heads=4, pe="fox", pe_params={"gate": gate}
    )
