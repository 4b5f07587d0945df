"""FoX: the forget gate's bias against the explicit sum, attention against a written-out softmax."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.kernels.choice import KernelChoice
from posexp.model import GPT, ModelConfig
from posexp.pe import PEContext, build_pe
from posexp.pe.fox import QUERY_CHUNK, gated_attention, running_log_forget, time_scale_bias


def fox(gate: str = "data", heads: int = 2, d: int = 4, layers: int = 2, **params):
    ctx = PEContext(heads * d, heads, d, train_length=16, n_layers=layers)
    torch.manual_seed(0)
    return build_pe("fox", ctx, gate=gate, **params)


def test_time_scale_bias_forgets_over_its_time_scale():
    b = time_scale_bias(3, 2.0, 200.0)
    # σ(b_h) = exp(-1/T_h), T_h = 2, 20, 200 (log-spaced)
    for bh, t in zip(b.tolist(), [2.0, 20.0, 200.0], strict=True):
        assert 1 / (1 + math.exp(-bh)) == pytest.approx(math.exp(-1 / t), rel=1e-5)


def test_bias_is_the_explicit_sum_of_log_forget_gates_over_j_to_i():
    pe = fox()
    x = torch.randn(2, 7, 8)
    log_f = pe.layer(1).gate(x)  # (B, H, T)
    f = torch.sigmoid(pe.layer(1).gate.proj(x).transpose(1, 2) + pe.layer(1).gate.bias[:, None])
    assert torch.allclose(log_f, f.log(), atol=1e-6)
    c_q, c_k = running_log_forget(log_f, None)
    for i in range(7):
        for j in range(i + 1):
            explicit = sum(math.log(f[1, 0, m].item()) for m in range(j + 1, i + 1))
            assert (c_q[1, 0, i] - c_k[1, 0, j]).item() == pytest.approx(explicit, abs=1e-5)
            assert (c_q[1, 0, i] - c_k[1, 0, j]).item() <= 1e-7  # a decay, never a boost


def explicit_fox(q, k, v, bias):
    """softmax over j <= i of q_i·k_j/√d + bias[i, j], one query at a time."""
    B, H, T, d = q.shape
    out = torch.zeros_like(q)
    for i in range(T):
        logits = (q[:, :, i : i + 1] @ k[:, :, : i + 1].transpose(-2, -1))[:, :, 0] / math.sqrt(d)
        w = (logits + bias[:, :, i, : i + 1]).softmax(-1)
        out[:, :, i] = (w[..., None] * v[:, :, : i + 1]).sum(2)
    return out


@pytest.mark.parametrize("length", [5, QUERY_CHUNK + 37])
def test_gated_attention_equals_the_written_out_softmax(length):
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, length, 4, dtype=torch.float64) for _ in range(3))
    log_f = torch.nn.functional.logsigmoid(torch.randn(1, 2, length, dtype=torch.float64))
    c, _ = running_log_forget(log_f, None)
    pos = torch.arange(length)
    y, w = gated_attention(q, k, v, c, c, pos, pos, need_weights=True)
    expected = explicit_fox(q, k, v, c[..., :, None] - c[..., None, :])
    assert torch.allclose(y, expected, atol=1e-10)
    assert torch.allclose(w.sum(-1), torch.ones(1, 2, length, dtype=torch.float64))
    y_sdpa, _ = gated_attention(q, k, v, c, c, pos, pos)
    assert torch.allclose(y_sdpa, expected, atol=1e-10)


def test_variants_gate_on_the_input_or_not():
    x = torch.randn(1, 5, 8)
    data, bias, fixed = fox("data"), fox("bias"), fox("fixed")
    assert not torch.allclose(data.layer(0).gate(x)[0, 0], data.layer(0).gate(x)[0, 0, :1])
    for pe in (bias, fixed):  # a constant per head: the same log f at every token
        log_f = pe.layer(0).gate(x)
        assert torch.allclose(log_f, log_f[..., :1].expand_as(log_f))
    assert fixed.layer(0).gate.bias.requires_grad is False
    assert bias.layer(0).gate.bias.requires_grad is True
    assert not hasattr(bias.layer(0).gate, "proj")


def test_each_layer_has_its_own_gate_in_the_model():
    model = GPT(ModelConfig(vocab_size=11, d_model=8, n_layers=3, n_heads=2, pe="fox"))
    gates = [model.pe.layer(i).gate.proj.weight for i in range(3)]
    assert len({id(g) for g in gates}) == 3
    names = {n for n, _ in model.named_parameters() if n.startswith("pe.")}
    assert len(names) == 6  # a projection and a bias per layer
    out = model(torch.randint(0, 11, (2, 9)), targets=torch.randint(0, 11, (2, 9)))
    out["loss"].backward()
    assert all(g.grad is not None and g.grad.abs().sum() > 0 for g in gates)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"gate": "full"}, "unknown pe.gate 'full'; allowed: bias, data, fixed"),
        ({"time_scale_min": 0}, "pe.time_scale_min"),
        ({"time_scale_min": 8, "time_scale_max": 2}, "pe.time_scale_max=2 is below"),
    ],
)
def test_bad_settings_are_one_line_errors(params, message):
    with pytest.raises(PosexpError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fox(**params)


@pytest.mark.parametrize("length,d", [(40, 16), (40, 8), (200, 32)])
def test_flexattention_forget_gate_equals_the_written_out_softmax(length, d):
    # The kernel path of one sequence from its start (lengths under 128 are padded on the CPU).
    from posexp.kernels import flex

    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 3, length, d) for _ in range(3))
    c, _ = running_log_forget(torch.nn.functional.logsigmoid(torch.randn(2, 3, length)), None)
    got = flex.flex_gated_attention(q, k, v, c)
    assert got is not None, flex._broken
    expected = explicit_fox(q, k, v, c[..., :, None] - c[..., None, :])
    assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-5)


def fox_model(attention: str) -> GPT:
    torch.manual_seed(3)
    cfg = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=2, pe="fox")
    return GPT(cfg, KernelChoice(bias=attention)).eval()


def test_the_model_takes_flexattention_for_long_sequences_and_agrees_with_sdpa(monkeypatch):
    from posexp.kernels import flex

    calls = []
    real = flex.flex_gated_attention
    monkeypatch.setattr(flex, "flex_gated_attention", lambda *a: calls.append(1) or real(*a))
    auto, sdpa = fox_model("flex"), fox_model("sdpa")  # auto: posexp's own kernel on a CPU
    long = torch.randint(0, 40, (2, flex.GATE_MIN_CPU + 6))
    with torch.no_grad():
        a, b = auto(long)["logits"], sdpa(long)["logits"]
        assert len(calls) == 2  # one per layer: a whole sequence, no gradient, long enough
        assert torch.allclose(a, b, atol=1e-5)
        calls.clear()
        auto(long[:, :100])  # short: SDPA is as fast
        assert calls == []
    auto(long)["logits"].sum().backward()  # training keeps SDPA (no CPU backward)
    assert calls == []


def test_a_forget_gate_kernel_that_fails_to_compile_leaves_the_position_biases_on_flex(
    monkeypatch,
):
    from posexp.kernels import flex

    monkeypatch.setattr(flex, "_broken", {"gate": "CppCompileError: simulated"})
    cpu = torch.device("cpu")
    assert not flex.use_flex("auto", cpu, False, 0.0, kind="gate")
    assert flex.use_flex("auto", cpu, False, 0.0, kind="bias")
    x = torch.randint(0, 40, (1, 30))
    with torch.no_grad():  # FoX falls back to SDPA with its bias, same numbers
        assert torch.allclose(fox_model("auto")(x)["logits"], fox_model("sdpa")(x)["logits"])


@pytest.fixture
def eager_flex_with_grads(monkeypatch):
    """FlexAttention run eagerly (its dense reference) with gradients on the CPU, standing in for
    a GPU's compiled backward: the score_mod's gradients are checked, not a kernel's."""
    import torch.nn.attention.flex_attention as flex_module

    from posexp.kernels import flex

    monkeypatch.setattr(flex_module, "_validate_device", lambda *a: None)
    monkeypatch.setattr(flex, "_compiled", lambda kind="bias": flex_module.flex_attention)
    monkeypatch.setattr(flex, "_verified", set())
    monkeypatch.setattr(flex, "_broken", {})
    return flex


def gate_inputs(length=150):
    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 3, length, 16, requires_grad=True) for _ in range(3))
    log_f = torch.nn.functional.logsigmoid(torch.randn(2, 3, length) + 2).requires_grad_()
    return q, k, v, log_f


@pytest.mark.parametrize("copy_for_keys", [True, False])
def test_the_gate_score_mods_gradients_equal_the_written_out_softmaxs(
    eager_flex_with_grads, copy_for_keys
):
    # copy_for_keys=True is the GPU's form (its backward refuses a tensor indexed twice).
    flex = eager_flex_with_grads
    q, k, v, log_f = gate_inputs()
    c, _ = running_log_forget(log_f, None)
    got = flex._run("gate", q, k, v, flex._gate_score(c, copy_for_keys), q.shape[2])
    expected = explicit_fox(q, k, v, c[..., :, None] - c[..., None, :])
    cotangent = torch.randn_like(expected)
    for a, b in zip(
        torch.autograd.grad((got * cotangent).sum(), (q, k, v, log_f)),
        torch.autograd.grad((expected * cotangent).sum(), (q, k, v, log_f)),
        strict=True,
    ):
        assert a.abs().max() > 0 and torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_the_gradient_check_passes_the_kernel_and_catches_a_wrong_gradient(
    eager_flex_with_grads, monkeypatch
):
    from posexp.pe.fox import gate_gradient_gap

    flex = eager_flex_with_grads
    q, k, v, log_f = gate_inputs()
    c, _ = running_log_forget(log_f, None)
    assert gate_gradient_gap(q, k, v, c) < 1e-5
    # A kernel that drops c's gradient through the keys (the mistake a GPU backward that reads
    # c once would make) is caught: c's gradient then differs by its own size.
    right = flex._gate_score

    def keys_detached(c, copy_for_keys):
        score_mod = right(c, copy_for_keys)
        cells = [cell.cell_contents for cell in score_mod.__closure__]
        c_keys = c.detach()

        def wrong(score, b, h, q_idx, kv_idx):
            return score + (cells[0][b, h, q_idx] - c_keys[b, h, kv_idx])

        return wrong

    monkeypatch.setattr(flex, "_gate_score", keys_detached)
    assert gate_gradient_gap(q, k, v, c) > 0.1


def test_a_gate_kernel_whose_gradients_differ_is_switched_off_with_one_warning(
    eager_flex_with_grads, caplog
):
    flex = eager_flex_with_grads
    cuda = torch.device("cuda")  # nothing runs on it: the check only records the device type
    with caplog.at_level("WARNING", logger="posexp"):
        assert not flex.verify_once("gate", cuda, torch.float32, lambda: 0.5)
        assert not flex.verify_once("gate", cuda, torch.float32, lambda: 0.0)  # stays off
    assert "by 5.0e-01 of the largest gradient, over the 1e-02 allowed" in flex._broken["gate"]
    assert len(caplog.records) == 1 and "forget gate" in caplog.text
    assert not flex.use_flex("auto", cuda, True, 0.0, kind="gate")
    assert flex.use_flex("auto", cuda, True, 0.0, kind="bias")  # the position biases keep flex


def test_a_gate_kernel_whose_backward_fails_is_switched_off(eager_flex_with_grads):
    flex = eager_flex_with_grads

    def no_backward():
        raise NotImplementedError("Using multiple indexing operations on the same tensor")

    assert not flex.verify_once("gate", torch.device("cuda"), torch.bfloat16, no_backward)
    assert flex._broken["gate"].startswith("NotImplementedError: Using multiple indexing")


def test_a_16_bit_check_allows_16_bit_rounding_and_is_run_once_per_device(eager_flex_with_grads):
    flex = eager_flex_with_grads
    calls = []
    cuda = torch.device("cuda")
    assert flex.verify_once("gate", cuda, torch.bfloat16, lambda: calls.append(1) or 0.03)
    assert flex.verify_once("gate", cuda, torch.bfloat16, lambda: calls.append(1) or 9.0)
    assert calls == [1] and "gate" not in flex._broken


def test_training_through_the_gate_kernel_checks_it_once_and_matches_sdpa(
    eager_flex_with_grads, monkeypatch
):
    # As on a GPU: a model whose gate kernel may train is checked on its first batch, then
    # trains on it, with the gradients of the SDPA path.
    flex = eager_flex_with_grads
    monkeypatch.setattr(flex, "use_gate_flex", lambda backend, q: backend != "sdpa")
    import posexp.pe.fox as fox_module

    checks, kernel_calls, gaps = [], [], []
    real_gap, real_kernel = fox_module.gate_gradient_gap, flex.flex_gated_attention

    def gap(*a):
        checks.append(1)
        gaps.append(real_gap(*a))
        return gaps[-1]

    monkeypatch.setattr(fox_module, "gate_gradient_gap", gap)
    monkeypatch.setattr(
        flex, "flex_gated_attention", lambda *a: kernel_calls.append(1) or real_kernel(*a)
    )
    auto, sdpa = fox_model("auto").train(), fox_model("sdpa").train()
    x = torch.randint(0, 40, (2, 70))
    for _ in range(2):
        auto(x)["logits"].square().mean().backward()
    sdpa(x)["logits"].square().mean().backward()
    sdpa(x)["logits"].square().mean().backward()
    assert len(checks) == 1 and gaps[0] < 1e-5 and ("gate", "cpu") in flex._verified
    assert len(kernel_calls) == 1 + 2 * 2  # the check's own call, then 2 layers, 2 steps
    for (name, a), (_, b) in zip(auto.named_parameters(), sdpa.named_parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5, rtol=1e-4), name


def test_bf16_training_on_the_matmul_kernel_adds_the_gate_and_agrees_with_sdpa(monkeypatch):
    from tests.helpers import bf16_step_matches_sdpa

    torch.manual_seed(3)
    cfg = dict(vocab_size=40, d_model=32, n_layers=2, n_heads=2, pe="fox")
    assert bf16_step_matches_sdpa(monkeypatch, cfg, torch.randint(0, 40, (2, 70))) == 2
