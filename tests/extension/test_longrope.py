"""LongRoPE: per-pair rescale factors, long past L0 and short within, against worked values."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig, rope_frequencies
from posexp.model import GPT, ModelConfig


def test_default_long_factor_is_ntk_aware_per_pair():
    # d = 8, s = 4: λ_i = 4^(2i/6) = 1, 4^(1/3), 4^(2/3), 4 for the four pairs.
    theta, _ = rope_frequencies("none", 8)
    inv, af = rope_frequencies("longrope", 8, factor=4.0, original_length=256, seq_len=1024)
    expected = theta.double() / torch.tensor(
        [1.0, 4 ** (1 / 3), 4 ** (2 / 3), 4.0], dtype=torch.float64
    )
    torch.testing.assert_close(inv.double(), expected, rtol=1e-6, atol=0)  # fp32 tables
    assert af == pytest.approx(math.sqrt(1.25))  # sqrt(1 + ln 4 / ln 256) = sqrt(1 + 1/4)


def test_within_l0_the_short_factors_apply():
    theta, _ = rope_frequencies("none", 8)
    inv, _ = rope_frequencies("longrope", 8, factor=4.0, original_length=256, seq_len=256)
    torch.testing.assert_close(inv, theta)  # short_factor null: 1 for every pair
    short = [1.0, 1.5, 2.0, 3.0]
    inv, _ = rope_frequencies(
        "longrope", 8, factor=4.0, original_length=256, seq_len=256, short_factor=short
    )
    torch.testing.assert_close(inv.double(), theta.double() / torch.tensor(short))
    long_, _ = rope_frequencies(
        "longrope", 8, factor=4.0, original_length=256, seq_len=257, short_factor=short
    )
    assert not torch.allclose(long_, inv)  # one token past L0: the long list


def test_factor_one_has_attention_factor_one():
    _, af = rope_frequencies("longrope", 8, factor=1.0, original_length=256, seq_len=256)
    assert af == 1.0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"long_factor": "fast"}, r"long_factor must be a list of numbers > 0"),
        ({"long_factor": [1, -2, 3, 4]}, r"long_factor\[1\] must be"),
        ({"short_factor": [1, 2]}, r"short_factor has 2 entries; the 8 rotated dims"),
    ],
)
def test_bad_lists_are_one_line_errors(params, message):
    with pytest.raises(PosexpError, match=message) as e:
        rope_frequencies("longrope", 8, factor=4.0, original_length=256, seq_len=512, **params)
    assert "\n" not in str(e.value)


def cached_against_recomputed(method: str, n_layers: int) -> list[float]:
    """Max |logit difference| between each cached decoding step and a full recomputation, for
    a model whose frequencies change with the length (L0 16), steps 10..39."""
    torch.manual_seed(0)
    ext = ExtensionConfig.from_dict({"method": method, "factor": 4.0, "original_length": 16})
    cfg = ModelConfig(
        vocab_size=23, d_model=32, n_layers=n_layers, n_heads=2, train_length=16, extension=ext
    )
    net = GPT(cfg).eval()
    with torch.no_grad():  # sharper attention than at initialisation, as after training
        for block in net.blocks:
            block.attn.qkv.weight.mul_(8)
    idx = torch.randint(0, 23, (2, 40))
    gaps = []
    with torch.no_grad():
        cache = net.new_cache()
        net(idx[:, :10], cache=cache)
        for t in range(10, 40):  # steps before L0 and past it
            step = net(idx[:, t : t + 1], cache=cache)["logits"][:, -1]
            again = net(idx[:, : t + 1])["logits"][:, -1]
            gaps.append((step - again).abs().max().item())
    return gaps


@pytest.mark.parametrize("method", ["longrope", "dynamic_ntk"])
def test_cached_generation_equals_recomputing_in_one_layer_and_within_l0(method):
    # The cached keys are kept unrotated and rotated again at every step at the current
    # length's frequencies: exact where the rotation is all that changes with the length.
    assert max(cached_against_recomputed(method, n_layers=1)) < 1e-5
    assert max(cached_against_recomputed(method, n_layers=2)[:6]) < 1e-5  # lengths up to L0


@pytest.mark.parametrize("method", ["longrope", "dynamic_ntk"])
def test_deeper_layers_cache_what_earlier_frequencies_made(method):
    # Past L0 a deeper layer's cached keys and values came from hidden states computed under
    # the frequencies of their own step; recomputing uses the current length's for all: the
    # documented difference (docs/catalogue.md), not equality.
    assert max(cached_against_recomputed(method, n_layers=2)[6:]) > 1e-3
