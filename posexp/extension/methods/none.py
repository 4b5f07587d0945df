"""No extension: plain RoPE frequencies, unscaled positions."""

from __future__ import annotations

import torch

from posexp.extension.registry import RopeSpec, register_extension


@register_extension("none", acts_on="nothing")
def none(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """Plain RoPE frequencies θ_i = base^(-2i/d)."""
    return spec.theta(), 1.0
