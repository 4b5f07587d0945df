"""Parity with Hugging Face transformers' modeling_rope_utils (the reference of docs/maths.md §3).

Skipped unless `transformers` is installed; it is the implementation users compare against.
"""

import itertools

import pytest
import torch

from posexp.extension import rope_frequencies

transformers = pytest.importorskip("transformers")
rope_utils = pytest.importorskip("transformers.modeling_rope_utils")

RTOL = 1e-6
HEAD_DIMS = (64, 128)
FACTORS = (2, 4, 8, 16, 1.5)
ORIGINAL_LENGTHS = (512, 2048, 4096)
BASES = (10000.0, 500000.0)
GRID = list(itertools.product(HEAD_DIMS, FACTORS, ORIGINAL_LENGTHS, BASES))


def hf(rope_type: str, head_dim: int, max_len: int, seq_len: int | None = None, **rope_params):
    """(inv_freq, attention_factor) from transformers for a Llama config with these RoPE params."""
    config = transformers.LlamaConfig(
        hidden_size=head_dim * 2,
        num_attention_heads=2,
        head_dim=head_dim,
        max_position_embeddings=max_len,
        rope_parameters={"rope_type": rope_type, **rope_params},
    )
    return rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)


def assert_parity(ours, theirs):
    (inv, af), (hf_inv, hf_af) = ours, theirs
    assert inv.shape == hf_inv.shape
    rel = ((inv.double() - hf_inv.double()).abs() / hf_inv.double().abs()).max().item()
    assert rel <= RTOL, f"max relative error {rel:.3g}"
    assert af == pytest.approx(hf_af, rel=1e-12)


@pytest.mark.parametrize("d,s,l0,base", GRID)
def test_pi_matches_linear(d, s, l0, base):
    assert_parity(
        rope_frequencies("pi", d, base=base, factor=s),
        hf("linear", d, l0, rope_theta=base, factor=float(s)),
    )


@pytest.mark.parametrize("d,l0,base", list(itertools.product(HEAD_DIMS, ORIGINAL_LENGTHS, BASES)))
def test_none_matches_linear_factor_one(d, l0, base):
    assert_parity(
        rope_frequencies("none", d, base=base), hf("linear", d, l0, rope_theta=base, factor=1.0)
    )


@pytest.mark.parametrize("d,s,l0,base", GRID)
def test_dynamic_ntk_matches_dynamic(d, s, l0, base):
    for seq_len in (l0 // 2, l0, 2 * l0, int(s * l0) + 17):
        assert_parity(
            rope_frequencies(
                "dynamic_ntk", d, base=base, factor=s, original_length=l0, seq_len=seq_len
            ),
            hf("dynamic", d, l0, seq_len=seq_len, rope_theta=base, factor=float(s)),
        )


@pytest.mark.parametrize("d,s,l0,base", GRID)
def test_static_ntk_matches_dynamic_at_factor_one(d, s, l0, base):
    # transformers has no static NTK, but dynamic with factor 1 at l = s·L0 has base' = base·s^(d/(d-2)).
    seq_len = int(s * l0)
    assert_parity(
        rope_frequencies("ntk", d, base=base, factor=seq_len / l0),
        hf("dynamic", d, l0, seq_len=seq_len, rope_theta=base, factor=1.0),
    )


@pytest.mark.parametrize("d,s,l0,base", GRID)
def test_yarn_matches_yarn(d, s, l0, base):
    common = {"rope_theta": base, "factor": float(s), "original_max_position_embeddings": l0}
    max_len = int(s * l0)
    assert_parity(
        rope_frequencies("yarn", d, base=base, factor=s, original_length=l0),
        hf("yarn", d, max_len, **common),
    )
    own = {"beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.25}
    assert_parity(
        rope_frequencies("yarn", d, base=base, factor=s, original_length=l0, **own),
        hf("yarn", d, max_len, **common, **own),
    )


@pytest.mark.parametrize("d,s,l0,base", GRID)
def test_llama3_matches_llama3(d, s, l0, base):
    for lff, hff in ((1.0, 4.0), (2.0, 8.0)):
        assert_parity(
            rope_frequencies(
                "llama3",
                d,
                base=base,
                factor=s,
                original_length=l0,
                low_freq_factor=lff,
                high_freq_factor=hff,
            ),
            hf(
                "llama3",
                d,
                int(s * l0),
                rope_theta=base,
                factor=float(s),
                original_max_position_embeddings=l0,
                low_freq_factor=lff,
                high_freq_factor=hff,
            ),
        )


def test_grid_covers_all_bands():
    # Guard against a vacuous parity: some llama3 case must use each of the three bands.
    inv, _ = rope_frequencies("llama3", 128, base=500000.0, factor=8, original_length=4096)
    theta, _ = rope_frequencies("none", 128, base=500000.0)
    ratio = theta / inv
    assert bool((ratio == 1).any()) and bool(torch.isclose(ratio, torch.tensor(8.0)).any())
    assert bool(((ratio > 1.001) & (ratio < 7.999)).any())
