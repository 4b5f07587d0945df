"""Gated attention (Qiu et al. 2025, "Gated Attention for Large Language Models"): a sigmoid gate
computed from the layer's input multiplies each head's attention output before the output
projection (their position G1).

``headwise``: one gate per head and token, broadcast over the head's channels; ``elementwise``
(the paper's recommendation): one per channel. The gate's projection starts like the others,
N(0, 0.02) without a bias, so every gate starts near sigmoid(0) = 1/2.
"""

from __future__ import annotations

import torch
from torch import nn

from posexp.errors import PosexpError
from posexp.kernels import onednn_linear

GATES = ("headwise", "elementwise")


class OutputGate(nn.Module):
    """y (B, H, T, d) times sigmoid(x W_g), x (B, T, d_model) the attention block's input."""

    def __init__(self, kind: str, d_model: int, n_heads: int) -> None:
        super().__init__()
        if kind not in GATES:
            raise PosexpError(
                f"attention.gate must be one of null, {', '.join(GATES)}; got {kind!r}"
            )
        self.kind, self.n_heads = kind, n_heads
        width = n_heads if kind == "headwise" else d_model
        self.proj = onednn_linear.Linear(d_model, width)

    def forward(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The gated attention output, same shape as ``y``."""
        B, T, _ = x.shape
        g = torch.sigmoid(self.proj(x)).view(B, T, self.n_heads, -1).transpose(1, 2)
        return y * g.to(y.dtype)
