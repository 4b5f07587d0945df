import torch

from posexp.extension import ExtensionConfig
from posexp.pe import PEContext, build_pe


def rope(head_dim=16, **ext):
    return build_pe(
        "rope", PEContext(head_dim * 2, 2, head_dim, 64, ExtensionConfig.from_dict(ext))
    )


def test_score_depends_only_on_relative_position():
    pe = rope()
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    tables = pe.prepare(128, torch.device("cpu"))

    def score(m, n):
        qr, _ = pe.rotate(q, q, torch.tensor([m]), torch.tensor([m]), tables)
        _, kr = pe.rotate(k, k, torch.tensor([n]), torch.tensor([n]), tables)
        return (qr * kr).sum().item()

    base = score(3, 1)
    for m, n in [(10, 8), (50, 48), (102, 100)]:
        assert abs(score(m, n) - base) < 1e-4
    assert abs(score(3, 0) - base) > 1e-3  # a different distance gives a different score


def test_rotation_preserves_norm_and_leaves_position_zero():
    pe = rope()
    x = torch.randn(2, 2, 10, 16)
    pos = torch.arange(10)
    xr, _ = pe.rotate(x, x, pos, pos, pe.prepare(10, torch.device("cpu")))
    assert torch.allclose(xr.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    assert torch.allclose(xr[:, :, 0], x[:, :, 0])


def test_rotation_angle_closed_form():
    # Pair (i, i + d/2) at position m is rotated by m * base^(-2i/d).
    pe = rope(head_dim=4)
    x = torch.tensor([1.0, 0.0, 0.0, 0.0]).view(1, 1, 1, 4)
    xr, _ = pe.rotate(
        x, x, torch.tensor([5]), torch.tensor([5]), pe.prepare(6, torch.device("cpu"))
    )
    angle = torch.tensor(5.0)
    assert torch.allclose(
        xr.flatten(),
        torch.stack([angle.cos(), torch.tensor(0.0), angle.sin(), torch.tensor(0.0)]),
        atol=1e-6,
    )


def test_values_untouched_by_model_rope():
    # RoPE rotates q and k only: with all-zero q/k weights attention is uniform over the past,
    # so the output is the running mean of v, whatever the positions.
    from posexp.model import GPT, ModelConfig

    model = GPT(ModelConfig(vocab_size=11, d_model=8, n_layers=1, n_heads=2, pe="rope"))
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.qkv.weight[:16] = 0
    x = torch.randn(1, 5, 8)
    out, _ = attn(x, model.pe, torch.arange(5), model.pe.prepare(5, x.device))
    v = x @ attn.qkv.weight[16:].T
    running_mean = v.cumsum(1) / torch.arange(1, 6).view(1, 5, 1)
    assert torch.allclose(out, attn.out(running_mean), atol=1e-5)


def test_packed_rotation_equals_rotating_q_and_k_apart():
    # The one-pass rotation of packed (B, T, 2, H, d) q/k against rotate() of each, at positions
    # that do not start at zero (randomized-position training hands such positions).
    pe = rope(head_dim=8)
    qk = torch.randn(2, 7, 2, 3, 8)
    pos = torch.tensor([0, 3, 4, 9, 10, 20, 31])
    tables = pe.prepare(32, torch.device("cpu"))
    q, k = pe.rotate_qk(qk, pos, tables)
    q_ref, k_ref = pe.rotate(
        qk[:, :, 0].transpose(1, 2), qk[:, :, 1].transpose(1, 2), pos, pos, tables
    )
    torch.testing.assert_close(q, q_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(k, k_ref, atol=1e-6, rtol=1e-5)
    q16, _ = pe.rotate_qk(qk.bfloat16(), pos, tables)  # tables in the compute dtype
    assert q16.dtype == torch.bfloat16
    torch.testing.assert_close(q16.float(), q_ref, atol=0.05, rtol=0.02)


def test_packed_rotation_gradient_is_the_rotation_by_the_opposite_angle():
    from posexp.pe.rope import rotate_half, rotate_packed

    angles = torch.rand(5, 1, 1, 3, dtype=torch.float64) * 6
    c, s = angles.cos(), angles.sin()
    cos, signed_sin = torch.cat((c, c), -1), torch.cat((-s, s), -1)
    x = torch.randn(2, 5, 2, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rotate_packed(t, cos, signed_sin), (x,))
    # ... and the forward is the rotate-half rotation by those angles.
    torch.testing.assert_close(rotate_packed(x, cos, signed_sin), rotate_half(x, c, s))


def test_packed_tables_are_built_once_per_forward_and_dtype():
    from posexp.pe import rope as rope_module

    pe = rope(head_dim=8)
    tables = pe.prepare(16, torch.device("cpu"))
    pos = torch.arange(16)
    first = tables.for_qk(pos, 3, torch.float32)
    assert all(a is b for a, b in zip(first, tables.for_qk(pos, 3, torch.float32), strict=True))
    assert first[0].shape == (16, 2, 3, 8) and first[0].is_contiguous()  # rows of 2·H·d values
    assert tables.for_qk(pos, 3, torch.bfloat16)[0].dtype == torch.bfloat16
    # Past PACKED_TABLE_ELEMENTS the tables broadcast instead of taking (T, 2, H, d) memory.
    limit, rope_module.PACKED_TABLE_ELEMENTS = rope_module.PACKED_TABLE_ELEMENTS, 16 * 2 * 3 * 8 - 1
    try:
        wide = pe.prepare(16, torch.device("cpu")).for_qk(pos, 3, torch.float32)
    finally:
        rope_module.PACKED_TABLE_ELEMENTS = limit
    assert wide[0].shape == (16, 1, 1, 8)
    torch.testing.assert_close(wide[0].expand(16, 2, 3, 8), first[0])
