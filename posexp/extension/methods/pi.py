"""Position interpolation (Chen et al. 2023): positions m/s, the same as frequencies θ/s."""

from __future__ import annotations

import torch

from posexp.extension.registry import RopeSpec, register_extension


@register_extension("pi", acts_on="positions", zero_shot_verdict=True)
def pi(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """Position interpolation: θ/s, the same as feeding positions m/s."""
    return spec.theta() / spec.factor, 1.0
