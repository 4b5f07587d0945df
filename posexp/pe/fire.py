"""FIRE (Li et al. 2023, "Functional Interpolation for Relative Positions Improves Long Context
Transformers"): a learned function of normalized distance, added to the attention logits.

The logit of query i for key j <= i gets ``f(ψ(i - j) / ψ(max(L, i)))[h]`` with
``ψ(x) = log(c·x + 1)``. ``f`` is a small MLP (1 -> ``hidden`` -> heads, ReLU) giving one value
per head; ``c`` and the threshold ``L`` are learned. Dividing by ψ(max(L, i)) maps every
distance into [0, 1] once queries pass L ("progressive interpolation"), so a longer context
reuses the inputs ``f`` was trained on. One FIRE is shared by every layer here, as posexp does
with T5's table; ``c`` starts at ``init_c`` and L at the training length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from posexp.errors import PosexpError
from posexp.pe.base import PEContext, PositionalEncoding, register_pe


def fire_inputs(q_pos: torch.Tensor, k_pos: torch.Tensor, c: torch.Tensor,
                threshold: torch.Tensor) -> torch.Tensor:
    """ψ(i - j) / ψ(max(L, i)) for every query i and key j (negative distances count as 0)."""
    distance = (q_pos[..., :, None] - k_pos[..., None, :]).clamp(min=0).float()
    norm = torch.log(c * torch.maximum(threshold, q_pos.float()) + 1)
    return torch.log(c * distance + 1) / norm[..., :, None]


@register_pe("fire")
class FIRE(PositionalEncoding):
    """Adds MLP(ψ(i - j) / ψ(max(L, i))) per head to each logit."""

    kind = "bias"
    # torch 2.13's CPU FlexAttention template emits C++ that does not compile for a score_mod
    # this large (an undeclared `cur_kvSplitSize` at some shapes); CPU keeps the SDPA bias path.
    flex_on_cpu = False

    def __init__(self, ctx: PEContext, hidden: int = 32, init_c: float = 0.1) -> None:
        super().__init__(ctx)
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise PosexpError(f"pe.hidden must be a positive integer, got {hidden!r}")
        if isinstance(init_c, bool) or not isinstance(init_c, (int, float)) or not init_c > 0:
            raise PosexpError(f"pe.init_c must be a number > 0, got {init_c!r}")
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, ctx.n_heads))
        # c is kept positive through its log; L starts at the training length.
        self.log_c = nn.Parameter(torch.tensor(float(init_c)).log())
        self.threshold = nn.Parameter(torch.tensor(float(ctx.train_length)))

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """hidden and init_c are checked when the encoding is built; nothing depends on seq_len."""

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The (H, Tq, Tk) bias, or (B, H, Tq, Tk) for per-row positions."""
        u = fire_inputs(q_pos, k_pos, self.log_c.exp(), self.threshold.abs())
        values = self.mlp(u[..., None])  # (..., Tq, Tk, H)
        return values.movedim(-1, -3).to(dtype)

    def score_mod(self) -> Callable[..., torch.Tensor]:
        """The same bias per score inside the attention kernel: the MLP written out unit by unit
        (``hidden`` multiply-adds per score), so no (Tq, Tk, hidden) tensor is ever stored."""
        first, last = self.mlp[0], self.mlp[2]
        hidden, heads = first.out_features, last.out_features
        # Every parameter in one flat tensor: torch 2.13's CPU code generation fails with many
        # separate (or 0-d) captured tensors. Layout: w1 | b1 | w2 (head-major) | b2 | c | L.
        packed = torch.cat([first.weight[:, 0], first.bias, last.weight.reshape(-1), last.bias,
                            self.log_c.exp().reshape(1), self.threshold.abs().reshape(1)])
        w2, b2 = 2 * hidden, 2 * hidden + heads * hidden
        c_at, l_at = b2 + heads, b2 + heads + 1

        def fire_score(score, b, h, q_idx, kv_idx):
            c = packed[c_at]
            distance = (q_idx - kv_idx).clamp(min=0).float()
            u = torch.log(c * distance + 1) / torch.log(c * torch.maximum(packed[l_at], q_idx.float()) + 1)
            out = packed[b2 + h]
            for k in range(hidden):
                out = out + packed[w2 + h * hidden + k] * torch.relu(packed[k] * u + packed[hidden + k])
            return score + out

        return fire_score
