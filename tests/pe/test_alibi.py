import torch

from posexp.pe import alibi_slopes


def test_slopes_8_heads():
    # Press et al.: 1/2, 1/4, ..., 1/256 for 8 heads.
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))


def test_slopes_12_heads_interleave():
    # Non-power of 2: the 8-head slopes, then every other slope of the 16-head sequence.
    eight = [2.0 ** -(i + 1) for i in range(8)]
    sixteen = [2.0 ** (-(i + 1) / 2) for i in range(16)]
    expected = eight + sixteen[0::2][:4]
    assert torch.allclose(alibi_slopes(12), torch.tensor(expected))
    assert torch.allclose(alibi_slopes(12)[8:], torch.tensor([2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]))


def test_slopes_1_and_3_heads():
    assert torch.allclose(alibi_slopes(1), torch.tensor([2.0**-8]))
    assert torch.allclose(alibi_slopes(3), torch.tensor([2.0**-4, 2.0**-8, 2.0**-2]))
