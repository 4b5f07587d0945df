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


def factor_lists(d: int, seed: int) -> tuple[list[float], list[float]]:
    """Per-pair long and short factor lists like Phi-3's: long rising from ~1 to ~s, short near 1."""
    g = torch.Generator().manual_seed(seed)
    long_ = (1 + torch.rand(d // 2, generator=g).sort().values * 15).tolist()
    short = (1 + torch.rand(d // 2, generator=g) * 0.1).tolist()
    return long_, short


@pytest.mark.parametrize("d,s,l0,base", GRID)
def test_longrope_matches_longrope(d, s, l0, base):
    long_, short = factor_lists(d, seed=d + l0)
    common = {"rope_theta": base, "factor": float(s), "original_max_position_embeddings": l0}
    lists = {"long_factor": long_, "short_factor": short}
    for seq_len in (l0 // 2, l0, l0 + 1, int(s * l0)):  # short within L0, long past it
        ours = rope_frequencies(
            "longrope", d, base=base, factor=s, original_length=l0, seq_len=seq_len, **lists
        )
        assert_parity(ours, hf("longrope", d, int(s * l0), seq_len=seq_len, **common, **lists))
    # An attention factor given overrides sqrt(1 + ln s / ln L0).
    assert_parity(
        rope_frequencies(
            "longrope",
            d,
            base=base,
            factor=s,
            original_length=l0,
            seq_len=2 * l0,
            attention_factor=1.3,
            **lists,
        ),
        hf("longrope", d, int(s * l0), seq_len=2 * l0, **common, **lists, attention_factor=1.3),
    )


@pytest.mark.parametrize("rotary_pct", [0.25, 0.5, 1.0])
def test_neox_partial_rotary_matches_gpt_neox(rotary_pct):
    from transformers.models.gpt_neox import modeling_gpt_neox as neox

    from posexp.pe import PEContext, build_pe

    heads, d, T = 2, 64, 50
    config = transformers.GPTNeoXConfig(
        hidden_size=heads * d,
        num_attention_heads=heads,
        rotary_pct=rotary_pct,
        max_position_embeddings=128,
    )
    assert config.rope_parameters["partial_rotary_factor"] == rotary_pct
    rotary = neox.GPTNeoXRotaryEmbedding(config)
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, heads, T, d, generator=g) for _ in range(2))
    positions = torch.arange(T)
    cos, sin = rotary(q, positions[None])
    hf_q, hf_k = neox.apply_rotary_pos_emb(q, k, cos, sin)
    pe = build_pe("neox_rope", PEContext(heads * d, heads, d, 64), rotary_pct=rotary_pct)
    state = pe.prepare(T, q.device)
    our_q, our_k = pe.rotate(q, k, positions, positions, state)
    torch.testing.assert_close(our_q, hf_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(our_k, hf_k, rtol=1e-5, atol=1e-5)
    # Packed (training's path) agrees with the separate rotation.
    packed = torch.stack((q, k), 2).permute(0, 3, 2, 1, 4).contiguous()  # (B, T, 2, H, d)
    pq, pk = pe.rotate_qk(packed, positions, state)
    torch.testing.assert_close(pq, our_q)
    torch.testing.assert_close(pk, our_k)
