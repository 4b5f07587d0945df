"""Which keys a query block sees, and its masks (posexp/model/window_blocks.py)."""

import pytest
import torch

from posexp.model import window_blocks


def test_the_worked_mask_l6_w3():
    # Row 5 sees {3, 4, 5}, row 1 sees {0, 1}.
    pos = torch.arange(6)
    mask = window_blocks.window_mask(pos, pos, 3, 0)
    assert mask[5].nonzero().flatten().tolist() == [3, 4, 5]
    assert mask[1].nonzero().flatten().tolist() == [0, 1]
    with_sink = window_blocks.window_mask(pos, pos, 3, 1)
    assert with_sink[5].nonzero().flatten().tolist() == [0, 3, 4, 5]


def test_a_blocks_keys_are_its_sinks_then_its_band():
    k = torch.arange(20.0).view(1, 1, 20, 1)
    idx, kb, _, kp = window_blocks.block_keys(k, k, torch.arange(20), 8, 12, 3, 2)
    # Queries 8..11 with a window of 3 reach back to key 6; sinks 0 and 1 come first.
    assert idx.tolist() == kp.tolist() == [0, 1, 6, 7, 8, 9, 10, 11]
    assert kb.flatten().tolist() == [0.0, 1.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]


@pytest.mark.parametrize(("window", "sinks"), [(40, 0), (40, 3), (130, 2), (1, 0)])
@pytest.mark.parametrize("dtype", [None, torch.float32])
def test_masks_kept_by_shape_equal_masks_built_for_each_block(window, sinks, dtype):
    T, block = 3 * 128 + 5, 128
    pos = torch.arange(T)
    masks = window_blocks.BlockMasks(pos, window, sinks)
    assert masks.reuse
    n_sinks = min(sinks, T)
    k = pos.view(1, 1, T, 1)
    for start in range(0, T, block):
        end = min(start + block, T)
        _, _, _, kp = window_blocks.block_keys(k, k, pos, start, end, window, n_sinks)
        qp = pos[start:end]
        got = masks.get(qp, kp, dtype)
        want = window_blocks.window_mask(qp, kp, window, sinks)
        if dtype is not None:
            want = torch.zeros(want.shape).masked_fill(~want, float("-inf"))
        assert torch.equal(got, want)
    # Built once per shape: the first blocks (band cut at 0), the interior ones, the last.
    assert len(masks.built) <= 2 + (window + block - 1) // block


def test_masks_are_not_kept_where_positions_are_not_0_to_t():
    assert not window_blocks.BlockMasks(torch.arange(5) + 3, 2, 0).reuse
    assert not window_blocks.BlockMasks(torch.arange(5), None, 0).reuse
    assert not window_blocks.BlockMasks(None, 2, 0).reuse


@pytest.mark.parametrize("sinks", [0, 3])
def test_a_bias_by_distance_is_kept_with_the_masks_only_without_sinks(sinks):
    T, block, window = 4 * 128 + 7, 128, 40
    pos = torch.arange(T)

    def bias(qp, kp):  # ALiBi's form, one slope: depends on i - j alone
        return -0.5 * (qp[:, None] - kp[None, :]).float()

    masks = window_blocks.BlockMasks(pos, window, sinks, bias, bias_by_distance=True)
    assert masks.bias_reused is (sinks == 0)
    k = pos.view(1, 1, T, 1)
    for start in range(0, T, block):
        end = min(start + block, T)
        _, _, _, kp = window_blocks.block_keys(k, k, pos, start, end, window, sinks)
        qp = pos[start:end]
        hidden = ~window_blocks.window_mask(qp, kp, window, sinks)
        want = bias(qp, kp).masked_fill(hidden, float("-inf"))
        assert torch.equal(masks.get(qp, kp, torch.float32), want)
