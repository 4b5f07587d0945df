"""PoPE (posexp/pe/pope.py): the score as a closed form of relative position and magnitudes."""

import math

import torch
import torch.nn.functional as F

from posexp.model import GPT, ModelConfig
from posexp.pe import PEContext, build_pe

D, H = 6, 2


def pope():
    return build_pe("pope", PEContext(D * H, H, D, 64))


def direct_score(q, k, t, s, delta, base=10000.0):
    """Σ_c softplus(q_c) softplus(k_c) cos((t - s)·θ_c - δ_c), θ_c = base^(-c/d), written out."""
    total = 0.0
    for c in range(D):
        theta = base ** (-c / D)
        mq, mk = math.log1p(math.exp(q[c])), math.log1p(math.exp(k[c]))
        total += mq * mk * math.cos((t - s) * theta - delta[c])
    return total


def test_the_score_is_a_function_of_relative_position_and_magnitudes():
    pe = pope()
    with torch.no_grad():
        pe.delta.copy_(-torch.rand(H, D))  # within [-2π, 0]
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, H, 1, D, generator=g), torch.randn(1, H, 1, D, generator=g)
    for t, s in [(5, 2), (2, 5), (40, 3), (0, 0)]:
        with torch.no_grad():
            qt, ks = pe.rotate(q, k, torch.tensor([t]), torch.tensor([s]))
        assert qt.shape[-1] == 2 * D
        for h in range(H):
            got = float(qt[0, h, 0] @ ks[0, h, 0])
            want = direct_score(
                q[0, h, 0].tolist(), k[0, h, 0].tolist(), t, s, pe.delta[h].tolist()
            )
            assert math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-5)
    # Shifting both positions by a constant leaves the score as it is.
    a = pe.rotate(q, k, torch.tensor([7]), torch.tensor([3]))
    b = pe.rotate(q, k, torch.tensor([107]), torch.tensor([103]))
    assert torch.allclose((a[0] * a[1]).sum(-1), (b[0] * b[1]).sum(-1), atol=1e-4)


def test_at_equal_positions_with_no_offset_the_score_is_the_product_of_magnitudes():
    pe = pope()
    q, k = torch.randn(1, H, 1, D), torch.randn(1, H, 1, D)
    qt, ks = pe.rotate(q, k, torch.tensor([9]), torch.tensor([9]))
    want = (F.softplus(q) * F.softplus(k)).sum(-1)
    assert torch.allclose((qt * ks).sum(-1), want, atol=1e-5) and bool((want >= 0).all())


def test_a_pope_model_decodes_with_its_cache_as_it_runs_whole():
    m = GPT(ModelConfig(vocab_size=30, d_model=12, n_layers=2, n_heads=2, pe="pope")).eval()
    idx = torch.randint(0, 30, (2, 14))
    full = m(idx)["logits"]
    cache = m.new_cache()
    steps = [m(idx[:, :4], cache=cache)["logits"]]
    steps += [m(idx[:, t : t + 1], cache=cache)["logits"] for t in range(4, 14)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
