"""The pieces of windowed attention (``posexp.model.attention.windowed_attention`` and the
window-plus-sinks methods): which keys a query sees (``window_mask``), the softmax with a sink
logit, the keys and masks of one block of queries, and banded attention over such blocks with
its log-sum-exp (``posexp/kernels/lse_attention.py``), so no step holds more than a block's
queries times its sinks and band of keys."""

from __future__ import annotations

from collections.abc import Callable

import torch

from posexp.kernels import lse_attention


def window_mask(
    q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None, sinks: int
) -> torch.Tensor:
    """True where query i may see key j: causally, and within the last ``window`` positions
    (0 <= i - j < window) or at a position below ``sinks``; broadcastable to (B, H, Tq, Tk)."""
    distance = q_pos[..., :, None] - k_pos[..., None, :]
    allowed = distance >= 0
    if window is not None:
        near = distance < window
        if sinks:
            near = near | (k_pos[..., None, :] < sinks)
        allowed = allowed & near
    return allowed[:, None] if allowed.dim() == 3 else allowed


def softmax_with_sink(scores: torch.Tensor, sink_logit: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the keys of ``scores`` (B, H, Tq, Tk); with a per-head ``sink_logit`` (H,),
    over the keys and one more logit that takes mass and gives no value (weights sum below 1)."""
    if sink_logit is None:
        return scores.softmax(dim=-1)
    sink = sink_logit.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
    return torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]


Bias = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (q_pos, k_pos) -> additive


class BlockMasks:
    """The masks of one call's query blocks: ``window_mask`` (boolean), or additive in a float
    dtype, 0 or -inf plus ``bias`` (if any). Where the positions are 0..T-1 and a window is
    set, a block's mask depends only on its number of queries and of keys (the sinks, then a
    band ending at the block's end), as does a bias read by distance alone
    (``bias_by_distance``) where there are no sinks, so each shape is built once, not once
    per block."""

    def __init__(
        self,
        pos: torch.Tensor | None,
        window: int | None,
        sinks: int,
        bias: Bias | None = None,
        bias_by_distance: bool = False,
    ) -> None:
        self.window, self.sinks, self.bias = window, sinks, bias
        self.reuse = (
            window is not None
            and pos is not None
            and pos.dim() == 1
            and torch.equal(pos, torch.arange(pos.numel(), device=pos.device))
        )
        # A sink's distance from the block's queries grows with the block: its bias differs.
        self.bias_reused = bias is None or (bias_by_distance and not sinks)
        self.built: dict[tuple[int, int, torch.dtype | None], torch.Tensor] = {}

    def get(self, qp: torch.Tensor, kp: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
        """The mask of queries at ``qp`` over keys at ``kp``: boolean, or additive in ``dtype``
        with the bias."""
        key = (qp.shape[-1], kp.shape[-1], dtype)
        keep = self.reuse and (dtype is None or self.bias_reused)
        mask = self.built.get(key) if keep else None
        if mask is None:
            mask = window_mask(qp, kp, self.window, self.sinks)
            if dtype is not None:
                if self.bias is None:
                    additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
                else:
                    additive = self.bias(qp, kp).to(dtype)
                mask = additive.masked_fill(~mask, float("-inf"))
            if keep:
                self.built[key] = mask
        return mask


def block_keys(
    k: torch.Tensor,
    v: torch.Tensor,
    k_pos: torch.Tensor,
    start: int,
    end: int,
    window: int | None,
    n_sinks: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The keys queries ``start:end`` (aligned positions) may see: the first ``n_sinks`` and the
    band from the first query's ``window``-th last key to the block's end; their indices, keys,
    values and positions (the band a slice, not a copy, where there are no sinks)."""
    low = max(n_sinks, start - window + 1) if window is not None else 0
    if not n_sinks:
        idx = torch.arange(low, end, device=k.device)
        return idx, k[:, :, low:end], v[:, :, low:end], k_pos[low:end]
    idx = torch.cat([torch.arange(n_sinks), torch.arange(low, end)]).to(k.device)
    return idx, k.index_select(2, idx), v.index_select(2, idx), k_pos[idx]


def banded_attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos: torch.Tensor,
    bias: Bias | None,
    window: int | None,
    sinks: int = 0,
    dropout: float = 0.0,
    block: int = 128,
    bias_by_distance: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention over queries and keys at the same positions ``pos`` (T,) in which a
    query sees its last ``window`` keys (None: all) and the first ``sinks`` positions, with
    ``bias(q_pos, k_pos)`` added (if given; ``bias_by_distance``: it depends on i - j alone);
    the output and its log-sum-exp (B, H, T). One
    ``block`` of queries at a time over only the keys it may see: O(T·(W + N)) scores."""
    T = q.shape[2]
    n_sinks = int((pos < sinks).sum()) if sinks and window is not None else 0
    masks = BlockMasks(pos, window, sinks, bias, bias_by_distance)
    outputs, lses = [], []
    for start in range(0, T, block):
        end = min(start + block, T)
        qp = pos[start:end]
        _, kb, vb, kp = block_keys(k, v, pos, start, end, window, n_sinks)
        mask = masks.get(qp, kp, q.dtype)
        out, lse = lse_attention.attention_lse(q[:, :, start:end], kb, vb, mask, dropout=dropout)
        outputs.append(out)
        lses.append(lse)
    return torch.cat(outputs, dim=2), torch.cat(lses, dim=2)
