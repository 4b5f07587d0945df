"""rope_frequencies against values fixed outside this code: docs/maths.md §3 and closed forms."""

import pytest
import torch

from posexp.extension import EXTENSIONS, position_scale, rope_frequencies

METHODS = ("none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope")


def closed_form_theta(d: int, base: float) -> torch.Tensor:
    """θ_i = base^(-2i/d), one Python float at a time (no tensor maths shared with the code)."""
    return torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)


def assert_rel_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-6) -> None:
    actual, expected = actual.double(), expected.double()
    assert actual.shape == expected.shape
    rel = ((actual - expected).abs() / expected.abs()).max().item()
    assert rel <= rtol, f"max relative error {rel:.3g} > {rtol}"


def test_registry_holds_the_seven_frequency_methods_and_the_training_free_ones():
    assert {n for n, m in EXTENSIONS.items() if not m.training_free} == set(METHODS)
    assert {n for n, m in EXTENSIONS.items() if m.training_free} == {
        "self_extend",
        "rerope",
        "logn",
        "blockwise",
        "streaming_llm",
        "lm_infinite",
        "dca",
        "string",
    }
    assert {name for name, m in EXTENSIONS.items() if m.dynamic} == {"dynamic_ntk", "longrope"}


@pytest.mark.parametrize("d,base", [(8, 10000.0), (64, 10000.0), (128, 500000.0)])
def test_none_is_closed_form_theta(d, base):
    inv_freq, af = rope_frequencies("none", d, base=base)
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == (d // 2,)
    assert_rel_close(inv_freq, closed_form_theta(d, base))
    assert af == 1.0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seq_len", [None, 512])
def test_factor_one_equals_none(method, seq_len):
    none_freq, _ = rope_frequencies("none", 64)
    inv_freq, af = rope_frequencies(method, 64, factor=1.0, original_length=512, seq_len=seq_len)
    assert_rel_close(inv_freq, none_freq)
    assert af == 1.0


@pytest.mark.parametrize("method", [m for m in METHODS if m != "dynamic_ntk"])
def test_factor_one_equals_none_past_training_length(method):
    none_freq, _ = rope_frequencies("none", 64)
    inv_freq, af = rope_frequencies(method, 64, factor=1.0, original_length=512, seq_len=4096)
    assert_rel_close(inv_freq, none_freq)
    assert af == 1.0


def test_dynamic_ntk_factor_one_still_scales_past_training_length():
    # docs/maths.md §3 / transformers: at s = 1 the bracket is l/L0, not 1, so dynamic NTK is
    # not a no-op past L0: base' = 1e4 · (4096/512)^(64/62) = 1e4 · 8^(32/31).
    inv_freq, af = rope_frequencies(
        "dynamic_ntk", 64, factor=1.0, original_length=512, seq_len=4096
    )
    assert_rel_close(inv_freq, closed_form_theta(64, 1e4 * 8 ** (32 / 31)))
    assert af == 1.0


@pytest.mark.parametrize("s", [2, 4.0, 2.5])
def test_pi_angle_at_m_times_s_equals_none_angle_at_m(s):
    none_freq, _ = rope_frequencies("none", 64)
    pi_freq, af = rope_frequencies("pi", 64, factor=s)
    for m in (1, 7, 300):
        assert_rel_close(pi_freq.double() * (m * s), none_freq.double() * m)
    assert af == 1.0


def test_ntk_base_d64_s4_is_41829():
    inv_freq, af = rope_frequencies("ntk", 64, factor=4)
    # inv_freq[1] = base'^(-2/64), so base' = inv_freq[1]^(-32).
    base_prime = inv_freq[1].double().item() ** (-32)
    assert abs(base_prime - 41829) < 1
    assert af == 1.0


@pytest.mark.parametrize("s,expected", [(2, 1.0693), (4, 1.1386), (8, 1.2079), (16, 1.2773)])
def test_yarn_attention_factor(s, expected):
    _, af = rope_frequencies("yarn", 64, factor=s, original_length=512)
    assert abs(af - expected) < 5e-5


def test_yarn_attention_factor_explicit_override():
    _, af = rope_frequencies("yarn", 64, factor=4, original_length=512, attention_factor=1.5)
    assert af == 1.5


@pytest.mark.parametrize("original_length,lo,hi", [(512, 3, 16), (1024, 5, 18)])
def test_yarn_correction_range(original_length, lo, hi):
    s = 4.0
    theta = closed_form_theta(64, 10000.0)
    inv_freq, _ = rope_frequencies("yarn", 64, factor=s, original_length=original_length)
    inv_freq = inv_freq.double()
    # Pairs up to lo rotate fast enough to keep θ; pairs from hi on are fully interpolated.
    assert_rel_close(inv_freq[: lo + 1], theta[: lo + 1])
    assert_rel_close(inv_freq[hi:], theta[hi:] / s)
    middle = slice(lo + 1, hi)
    assert bool(((inv_freq[middle] < theta[middle]) & (inv_freq[middle] > theta[middle] / s)).all())


@pytest.mark.parametrize("seq_len", [None, 1, 256, 512])
def test_dynamic_ntk_within_training_length_is_unscaled(seq_len):
    none_freq, _ = rope_frequencies("none", 64)
    inv_freq, _ = rope_frequencies(
        "dynamic_ntk", 64, factor=4, original_length=512, seq_len=seq_len
    )
    assert torch.equal(inv_freq, none_freq)


def test_dynamic_ntk_at_twice_training_length():
    d, base, s, length, l0 = 64, 10000.0, 2.0, 1024, 512
    base_prime = base * ((s * length / l0) - (s - 1)) ** (d / (d - 2))  # = 1e4 · 3^(32/31)
    inv_freq, af = rope_frequencies("dynamic_ntk", d, factor=s, original_length=l0, seq_len=length)
    assert_rel_close(inv_freq, closed_form_theta(d, base_prime))
    assert af == 1.0


def test_dynamic_ntk_grows_with_length():
    lengths = (600, 1024, 4096)
    lows = [
        rope_frequencies("dynamic_ntk", 64, factor=4, original_length=512, seq_len=n)[0][-1]
        for n in lengths
    ]
    assert lows[0] > lows[1] > lows[2]


def test_llama3_three_bands_by_hand():
    # d 16, base 1e4: θ_i = 10^(-i/2), λ_i = 2π/θ_i = 6.28, 19.9, 62.8, 199, 628, 1987, 6283, 19869.
    # L0 1024, lff 1, hff 4: λ < 256 keeps θ (i 0..3); λ > 1024 gets θ/8 (i 5..7);
    # i 4 (λ 628.3): sm = (1024/628.3 - 1)/3 = 0.20992, inv = 0.79008·0.01/8 + 0.20992·0.01 = 0.0030868.
    inv_freq, af = rope_frequencies("llama3", 16, factor=8, original_length=1024)
    expected = [1.0, 10**-0.5, 0.1, 10**-1.5, 0.0030868, 10**-2.5 / 8, 1e-3 / 8, 10**-3.5 / 8]
    assert_rel_close(inv_freq, torch.tensor(expected, dtype=torch.float64), rtol=1e-4)
    assert af == 1.0


def test_position_scale():
    assert position_scale("none", 1.0) == 1.0
    assert position_scale("pi", 4) == 0.25
    # Frequency-only methods leave positions alone.
    assert position_scale("yarn", 4) == 1.0
