"""xPos: RoPE's score times ζ_i^((n - m)/B) per pair, worked out by hand for a 4-dim head."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.pe import PEContext, PositionOutOfRange, build_pe, get_pe


def xpos(head_dim=4, **params):
    ctx = PEContext(d_model=head_dim, n_heads=1, head_dim=head_dim, train_length=64)
    return build_pe("xpos", ctx, **params)


def score(pe, q, k, n, m):
    """q at position n against k at position m, through the PE's rotate."""
    length = max(n, m) + 1
    state = pe.prepare(length, torch.device("cpu"))
    qs = torch.zeros(1, 1, length, q.numel())
    ks = torch.zeros_like(qs)
    qs[0, 0, n], ks[0, 0, m] = q, k
    pos = torch.arange(length)
    rq, rk = pe.rotate(qs, ks, pos, pos, state)
    return float(rq[0, 0, n] @ rk[0, 0, m])


def test_score_by_hand_for_two_pairs():
    pe = xpos()
    q, k = torch.tensor([1.0, 2.0, -0.5, 0.3]), torch.tensor([0.4, -1.0, 0.7, 2.0])
    n, m = 9, 3
    zeta = [(0 + 0.4) / 1.4, (2 / 4 + 0.4) / 1.4]  # 0.2857, 0.6429
    theta = [1.0, 10000.0 ** (-2 / 4)]
    expected = 0.0
    for i in range(2):  # pair i is (dim i, dim i + 2): rotate-half
        a = (n - m) * theta[i]
        # <R(nθ)q, R(mθ)k> for one pair, written out: it depends on (n - m)θ alone.
        qa, qb, ka, kb = q[i], q[i + 2], k[i], k[i + 2]
        rotated = (qa * ka + qb * kb) * math.cos(a) + (qa * kb - qb * ka) * math.sin(a)
        expected += float(rotated) * zeta[i] ** ((n - m) / 512)
    assert score(pe, q, k, n, m) == pytest.approx(expected, rel=1e-5)


def test_score_depends_on_the_offset_alone_and_decays():
    pe = xpos(head_dim=8)
    torch.manual_seed(0)
    q, k = torch.randn(8), torch.randn(8)
    assert score(pe, q, k, 40, 10) == pytest.approx(score(pe, q, k, 130, 100), rel=1e-4)
    flat = xpos(head_dim=8, scale_base=1e12)  # B -> infinity: no decay, plain RoPE
    rope = build_pe("rope", PEContext(d_model=8, n_heads=1, head_dim=8, train_length=64))
    assert score(flat, q, k, 40, 10) == pytest.approx(score(rope, q, k, 40, 10), rel=1e-5)
    # One pair alone (the fastest, dims 0 and 4): its RoPE term times ζ_0^((n - m)/B).
    one = torch.zeros(8)
    one[0], one[4] = 1.0, 0.5
    decay = (0.4 / 1.4) ** (600 / 512)
    assert score(pe, one, one, 600, 0) == pytest.approx(
        score(flat, one, one, 600, 0) * decay, rel=1e-4
    )


def test_lengths_past_the_finite_range_are_refused():
    pe = xpos()
    assert 32_000 < pe.max_positions < 33_000
    with pytest.raises(PositionOutOfRange, match="xpos holds 3[0-9],[0-9]{3} positions"):
        pe.prepare(pe.max_positions + 1, torch.device("cpu"))


def test_bad_gamma_is_one_line():
    with pytest.raises(PosexpError, match="pe.gamma must be a finite number > 0, got -1"):
        get_pe("xpos").check_params({"gamma": -1}, 64)
