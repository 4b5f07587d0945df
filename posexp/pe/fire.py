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

import torch
from torch import nn

from posexp.checks import number, positive_int
from posexp.pe.base import LogitTerm, PEContext, PositionalEncoding, register_pe
from posexp.pe.distance_bias import DistanceBias


def fire_inputs(
    q_pos: torch.Tensor, k_pos: torch.Tensor, c: torch.Tensor, threshold: torch.Tensor
) -> torch.Tensor:
    """ψ(i - j) / ψ(max(L, i)) for every query i and key j (negative distances count as 0)."""
    distance = (q_pos[..., :, None] - k_pos[..., None, :]).clamp(min=0).float()
    norm = torch.log(c * torch.maximum(threshold, q_pos.float()) + 1)
    return torch.log(c * distance + 1) / norm[..., :, None]


# The tables' least length: every evaluation up to it shares one compiled kernel (a captured
# tensor's shape is fixed, so each new table length compiles the kernel again), for 512 KiB.
TABLE_MIN = 1 << 16


def fire_tables(
    c: torch.Tensor, threshold: torch.Tensor, length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """ψ(d) for every distance d and 1/ψ(max(L, i)) for every query i below the table length
    (a power of two, at least ``length`` and TABLE_MIN), so fire_inputs = table[i - j] · table[i]."""
    size = max(TABLE_MIN, 1 << (max(length, 1) - 1).bit_length())
    index = torch.arange(size, device=c.device, dtype=torch.float32)
    return torch.log(c * index + 1), 1 / torch.log(c * torch.maximum(threshold, index) + 1)


@register_pe("fire")
class FIRE(PositionalEncoding):
    """Adds MLP(ψ(i - j) / ψ(max(L, i))) per head to each logit."""

    kind = "bias"
    logit_term = LogitTerm.POSITION_BIAS
    label, order, family = "FIRE", 60, "relative bias"

    def __init__(self, ctx: PEContext, hidden: int = 32, init_c: float = 0.1) -> None:
        super().__init__(ctx)
        positive_int("pe.hidden", hidden)
        number("pe.init_c", init_c, "> 0")
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, ctx.n_heads))
        # c is kept positive through its log; L starts at the training length.
        self.log_c = nn.Parameter(torch.tensor(float(init_c)).log())
        self.threshold = nn.Parameter(torch.tensor(float(ctx.train_length)))

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The (H, Tq, Tk) bias, or (B, H, Tq, Tk) for per-row positions."""
        u = fire_inputs(q_pos, k_pos, self.log_c.exp(), self.threshold.abs())
        values = self.mlp(u[..., None])  # (..., Tq, Tk, H)
        return values.movedim(-1, -3).to(dtype)

    @torch.no_grad()
    def piecewise(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The MLP on [0, 1] as intercept (H,) + slope (H,)·u + Σ_k gain[:, k]·relu(u - kink[k])
        over the units that bend inside (0, 1) (``score_mod`` says how the others fold)."""
        w1, b1 = self.mlp[0].weight[:, 0], self.mlp[0].bias
        w2, b2 = self.mlp[2].weight, self.mlp[2].bias  # (heads, hidden), (heads,)
        kink = -b1 / w1  # inf or nan where w1 == 0: never inside
        bends = (kink > 0) & (kink < 1)
        linear = ~bends & (0.5 * w1 + b1 > 0)  # on at the middle of [0, 1], so on throughout
        gain = w2 * w1.abs()  # (heads, hidden): each unit's slope past its kink
        falling = bends & (w1 < 0)  # |w|·(κ - u) of these joins the affine term
        intercept = b2 + w2[:, linear] @ b1[linear] + gain[:, falling] @ kink[falling]
        slope = w2[:, linear] @ w1[linear] - gain[:, falling].sum(1)
        return intercept, slope, kink[bends].contiguous(), gain[:, bends].contiguous()

    def distance_bias(self, length: int, device: torch.device) -> DistanceBias:
        """ψ(d) by distance, 1/ψ(max(L, i)) by query and the MLP in pieces (``piecewise``)."""
        with torch.no_grad():
            log_distance, inverse_norm = fire_tables(self.log_c.exp(), self.threshold.abs(), length)
        return DistanceBias(log_distance, inverse_norm, self.piecewise())

    def score_mod(self, length: int | None = None) -> Callable[..., torch.Tensor]:
        """The same bias per score inside the attention kernel: the MLP written out unit by unit,
        so no (Tq, Tk, hidden) tensor is ever stored.

        Inputs lie in [0, 1], where a ReLU unit whose kink κ = -b/w falls outside (0, 1) is
        either always off or always linear. Without gradients (evaluation) those units are folded
        into one affine term per head, and each unit that bends is rewritten about its kink,
        relu(w·u + b) = |w|·relu(u - κ), plus |w|·(κ - u) when w < 0 (folded too): two
        operations per unit and score instead of three. Without gradients and given ``length``,
        the input is also read from two tables (ψ of every distance, 1/ψ(max(L, i)) of every
        query) instead of two logarithms per score (docs/performance.md has the timings).
        """
        w1, b1 = self.mlp[0].weight[:, 0], self.mlp[0].bias
        w2, b2 = self.mlp[2].weight, self.mlp[2].bias  # (heads, hidden), (heads,)
        heads = w2.shape[0]

        # Only tensors are captured (posexp/kernels/flex.py fixes their shapes). FlexAttention's CUDA
        # backward lets each captured tensor that needs a gradient be indexed once per score, so
        # every scalar becomes its own (heads,) tensor read at [h], and every unit its own three:
        # one indexing each. The unit count is a loop bound, so the kernel is compiled for it.
        def per_head(x: torch.Tensor) -> torch.Tensor:
            return x.expand(heads).contiguous()

        c, threshold = per_head(self.log_c.exp()), per_head(self.threshold.abs())
        if torch.is_grad_enabled():
            units = [
                (per_head(w1[k]), per_head(b1[k]), w2[:, k].contiguous()) for k in range(len(b1))
            ]

            def mlp(u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
                out = b2[h]
                for w_in, b_in, w_out in units:
                    out = out + w_out[h] * torch.relu(w_in[h] * u + b_in[h])
                return out

        else:
            intercept, slope, kink, gain = self.piecewise()
            units = [(per_head(kink[k]), gain[:, k].contiguous()) for k in range(len(kink))]

            def mlp(u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
                out = intercept[h] + slope[h] * u
                for kink_h, gain_h in units:
                    out = out + gain_h[h] * torch.relu(u - kink_h[h])
                return out

        if length is not None and not torch.is_grad_enabled():
            log_distance, inverse_norm = fire_tables(c[0], threshold[0], length)

            def fire_table_score(score, b, h, q_idx, kv_idx):
                u = log_distance[(q_idx - kv_idx).clamp(min=0)] * inverse_norm[q_idx]
                return score + mlp(u, h)

            return fire_table_score

        def fire_score(score, b, h, q_idx, kv_idx):
            c_h, threshold_h = c[h], threshold[h]
            distance = (q_idx - kv_idx).clamp(min=0).float()
            u = torch.log(c_h * distance + 1) / torch.log(
                c_h * torch.maximum(threshold_h, q_idx.float()) + 1
            )
            return score + mlp(u, h)

        return fire_score
