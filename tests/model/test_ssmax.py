"""Scalable-Softmax (posexp/model/ssmax.py): the factor's closed form and attention against a
direct softmax of n^(s·z)."""

import math

import torch

from posexp.model import GPT, ModelConfig
from posexp.model.ssmax import QueryLengthScale


def test_the_factor_is_s_ln_n_per_head_and_position():
    scale = QueryLengthScale(2, 0.43)
    with torch.no_grad():
        scale.s.copy_(torch.tensor([0.43, 1.0]))
    f = scale.factor(torch.tensor([0, 1, 9]))
    expected = torch.tensor(
        [[0.0, 0.43 * math.log(2), 0.43 * math.log(10)], [0.0, math.log(2), math.log(10)]]
    )
    assert torch.allclose(f, expected)
    # A window of 4 keys: n = min(p + 1, 4).
    assert torch.allclose(scale.factor(torch.tensor([9]), seen=4)[1], torch.tensor([math.log(4)]))
    # The bias variant: s ln n + b.
    assert torch.allclose(
        QueryLengthScale(1, 0.5, 2.0).factor(torch.tensor([3]))[0],
        torch.tensor([0.5 * math.log(4) + 2.0]),
    )


def test_ssmax_is_the_softmax_of_n_to_the_s_z():
    # SSMax(z)_j = n^(s z_j) / sum_k n^(s z_k), with n the keys a query sees.
    s, z = 0.7, torch.tensor([0.3, -1.0, 2.0, 0.5])
    n = len(z)
    direct = n ** (s * z) / (n ** (s * z)).sum()
    q = QueryLengthScale(1, s)(z.view(1, 1, 1, n), torch.tensor([n - 1]))  # query at p = n - 1
    assert torch.allclose(q.flatten().softmax(-1), direct)


def test_s_zero_with_bias_one_is_plain_attention():
    torch.manual_seed(0)
    plain = GPT(ModelConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4)).eval()
    torch.manual_seed(0)
    ss = GPT(
        ModelConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, ssmax=0.0, ssmax_bias=1.0)
    ).eval()
    idx = torch.randint(0, 30, (2, 20))
    assert torch.equal(ss(idx)["logits"], plain(idx)["logits"])
    with torch.no_grad():
        ss.blocks[0].attn.ssmax.s.fill_(0.5)
    assert not torch.allclose(ss(idx)["logits"], plain(idx)["logits"], atol=1e-4)


def test_s_is_learned_per_head():
    m = GPT(ModelConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, ssmax=0.43)).train()
    idx = torch.randint(0, 30, (2, 12))
    m(idx, targets=idx)["loss"].backward()
    s = m.blocks[1].attn.ssmax.s
    assert s.shape == (4,) and s.grad is not None and s.grad.abs().sum() > 0
