"""The value a null setting stands for (``Setting.null_means``, what evaluation records keep)
is the value the method itself uses: with every null filled in, each method computes the same
frequencies or the same attention plan as with the nulls."""

from __future__ import annotations

import pytest
import torch

from posexp.extension import EXTENSIONS, ExtensionConfig
from posexp.extension.registry import rope_frequencies

NULLS = [
    (name, setting.name)
    for name, method in EXTENSIONS.items()
    for setting in method.settings
    if setting.null_means is not None
]
SCALES = [(1.0, 64), (4.0, 64), (8.0, 256), (3.0, 100)]


def test_every_derived_default_is_declared():
    # The nulls that stand for a value at s and L0, by method; the others are modes (ReRoPE's
    # leaky_k) or per-pair lists (LongRoPE's factors).
    assert {n for n, _ in NULLS} == {
        "self_extend",
        "rerope",
        "blockwise",
        "logn",
        "ntk",
        "yarn",
        "longrope",
        "streaming_llm",
        "lm_infinite",
        "dca",
        "string",
    }


@pytest.mark.parametrize("factor, length", SCALES)
@pytest.mark.parametrize("method", sorted({n for n, _ in NULLS}))
def test_filled_in_nulls_compute_what_the_nulls_do(method, factor, length):
    nulls = ExtensionConfig(method, factor, length)
    filled = ExtensionConfig(method, factor, length, nulls.effective_params)
    assert all(filled.params[s] is not None for m, s in NULLS if m == method)
    plan = nulls.attention_plan()
    if plan is None:  # a frequency method
        a, b = (
            rope_frequencies(method, 16, 10000.0, factor, length, int(factor * length), **c.params)
            for c in (nulls, filled)
        )
        torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
        assert a[1] == pytest.approx(b[1], rel=1e-12)
        return
    other = filled.attention_plan()
    assert (plan.window, plan.block) == (other.window, other.block)
    pos = torch.arange(int(factor * length) + 7)
    if plan.far is not None:
        for x, y in zip(plan.far(pos, pos), other.far(pos, pos), strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    if plan.query_scale is not None:
        torch.testing.assert_close(plan.query_scale(pos), other.query_scale(pos), rtol=0, atol=0)


def test_values_given_are_kept_and_nulls_follow_them():
    # Self-Extend's group null is sized from the window, given or filled: at L0 64, W 8 and
    # s 8 the largest grouped distance 511 // G + 8 - 8 // G stays below 64 from G = 10 (G 9: 64).
    config = ExtensionConfig("self_extend", 8.0, 64, {"window": 8})
    assert config.effective_params == {"window": 8, "group": 10, "logn": False}
    assert ExtensionConfig("self_extend", 8.0, 64).effective_params["window"] == 16
    assert ExtensionConfig("yarn", 4.0, 64).effective_params["attention_factor"] == pytest.approx(
        0.1 * torch.log(torch.tensor(4.0)).item() + 1
    )
