"""Gated attention (posexp/model/gate.py): the gate's closed forms and its place in the model."""

import pytest
import torch

from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.model.gate import OutputGate


def test_a_headwise_gate_scales_each_heads_output_by_one_sigmoid():
    gate = OutputGate("headwise", d_model=4, n_heads=2)
    with torch.no_grad():
        gate.proj.weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, -2.0]]))
    x = torch.tensor([[[0.5, 1.0, 2.0, 1.0]]])  # (B 1, T 1, d 4)
    y = torch.tensor([[[[1.0, 2.0]], [[3.0, -1.0]]]])  # (B, H 2, T, d_head 2)
    got = gate(y, x)
    s0, s1 = 1 / (1 + torch.exp(torch.tensor(-0.5))), 1 / (1 + torch.exp(torch.tensor(2.0)))
    assert torch.allclose(got[0, 0, 0], torch.tensor([1.0, 2.0]) * s0)  # one gate, both channels
    assert torch.allclose(got[0, 1, 0], torch.tensor([3.0, -1.0]) * s1)


def test_an_elementwise_gate_has_one_sigmoid_per_channel():
    gate = OutputGate("elementwise", d_model=4, n_heads=2)
    with torch.no_grad():
        gate.proj.weight.copy_(torch.eye(4))
    x = torch.tensor([[[0.0, 1.0, -1.0, 3.0]]])
    y = torch.ones(1, 2, 1, 2)
    assert torch.allclose(gate(y, x).flatten(), torch.sigmoid(x.flatten()))


def test_a_saturated_gate_gives_the_ungated_model():
    torch.manual_seed(0)
    plain = GPT(ModelConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4)).eval()
    torch.manual_seed(0)
    gated = GPT(ModelConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, gate="headwise"))
    gated.load_state_dict(plain.state_dict(), strict=False)
    # Gate logits of +40 (sigmoid = 1 in float32): the gate's bias tending to +inf.
    x_ones = torch.ones(1, 1, 32)
    for block in gated.blocks:
        with torch.no_grad():
            block.attn.gate.proj.weight.fill_(0.0)
        block.attn.gate.proj.register_forward_hook(lambda m, i, o: o + 40.0)
    idx = torch.randint(0, 30, (2, 12))
    assert torch.allclose(gated.eval()(idx)["logits"], plain(idx)["logits"], atol=1e-6)
    assert gated.blocks[0].attn.gate(torch.ones(1, 4, 1, 8), x_ones).eq(1).all()


def test_a_bad_gate_is_one_line():
    with pytest.raises(PosexpError, match="attention.gate must be one of"):
        GPT(ModelConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, gate="channel"))
