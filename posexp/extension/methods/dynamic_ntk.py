"""Dynamic NTK scaling: the NTK base recomputed for the current sequence length."""

from __future__ import annotations

import torch

from posexp.extension.methods.ntk import ntk_exponent
from posexp.extension.registry import RopeSpec, register_extension


@register_extension("dynamic_ntk", dynamic=True, needs_original_length=True, static_form="ntk")
def dynamic_ntk(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """NTK scaling recomputed for the current length l: base' = base·(s·l/L0 − (s−1))^(d/(d−2))."""
    exponent = ntk_exponent(spec, "dynamic_ntk")
    length = spec.seq_len if spec.seq_len is not None else spec.original_length
    if length <= spec.original_length:
        # Within the training length the model must see exactly the frequencies it was trained on.
        return spec.theta(), 1.0
    s = spec.factor
    return spec.theta(spec.base * (s * length / spec.original_length - (s - 1)) ** exponent), 1.0
