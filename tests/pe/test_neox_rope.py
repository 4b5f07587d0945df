"""GPT-NeoX partial rotary: RoPE's whole frequency range on the first r dims (not p-RoPE)."""

from __future__ import annotations

import pytest
import torch

from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.pe import PEContext, build_pe
from tests.helpers import run_config


def pe(name: str, d: int = 16, **params):
    return build_pe(name, PEContext(2 * d, 2, d, 64), **params)


def test_the_first_r_dims_rotate_with_base_to_the_minus_2i_over_r():
    neox = pe("neox_rope", rotary_pct=0.5)  # r = 8 of 16 dims
    x = torch.randn(1, 2, 5, 16)
    pos = torch.arange(5)
    q, _ = neox.rotate(x, x, pos, pos, neox.prepare(5, x.device))
    assert torch.equal(q[..., 8:], x[..., 8:])  # passed through
    theta = 10000.0 ** (-torch.arange(0, 8, 2) / 8)  # 1, 0.1, 0.01, 0.001
    a = pos[:, None] * theta  # pairs (i, i + 4) inside the rotated 8
    x1, x2 = x[..., :4], x[..., 4:8]
    expected = torch.cat((x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin()), -1)
    torch.testing.assert_close(q[..., :8], expected)


def test_neox_and_p_rope_at_the_same_fraction_rotate_differently():
    x = torch.randn(1, 2, 6, 16)
    pos = torch.arange(6)
    neox, prope = pe("neox_rope", rotary_pct=0.25), pe("p_rope", fraction=0.25)
    qn, _ = neox.rotate(x, x, pos, pos, neox.prepare(6, x.device))
    qp, _ = prope.rotate(x, x, pos, pos, prope.prepare(6, x.device))
    changed_n = (qn - x).abs().amax((0, 1, 2)) > 1e-6
    changed_p = (qp - x).abs().amax((0, 1, 2)) > 1e-6
    assert changed_n.nonzero().flatten().tolist() == [0, 1, 2, 3]  # the first r = 4 dims
    assert changed_n.tolist() != changed_p.tolist()  # p-RoPE's fastest pairs span the head


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["pe.rotary_pct=0.1"], r"rotates int\(0.1 x 32\) = 3 dims"),
        (["pe.rotary_pct=1.5"], r"pe.rotary_pct must be"),
        (
            ["extension=longrope", "extension.long_factor=[1,2,3]"],
            r"long_factor has 3 entries; the 8 rotated dims of each head need 4",
        ),
    ],
)
def test_bad_settings_fail_with_the_config(overrides, message):
    with pytest.raises(PosexpError, match=message) as e:
        RunConfig.from_dict(run_config("pe=neox_rope", *overrides))
    assert "\n" not in str(e.value)
