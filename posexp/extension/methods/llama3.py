"""Llama 3.1's RoPE scaling: wavelength bands keep θ, get θ/s, or blend the two."""

from __future__ import annotations

import math
from typing import Any

import torch

from posexp.errors import PosexpError
from posexp.extension.registry import RopeSpec, register_extension
from posexp.extension.settings import Setting, number_rule

SETTINGS = (
    Setting(
        "low_freq_factor",
        "a number in (0, high_freq_factor): wavelengths above L0/low_freq_factor get θ/s",
        number_rule("> 0"),
    ),
    Setting(
        "high_freq_factor",
        "a number > low_freq_factor: wavelengths below L0/high_freq_factor keep θ",
        number_rule("> 0"),
    ),
)


def relations(params: dict[str, Any], prefix: str) -> dict[str, Any]:
    """low_freq_factor < high_freq_factor."""
    lff, hff = params["low_freq_factor"], params["high_freq_factor"]
    if not lff < hff:
        raise PosexpError(
            f"{prefix}low_freq_factor must be < high_freq_factor, got low_freq_factor={lff:g}, "
            f"high_freq_factor={hff:g}"
        )
    return params


@register_extension("llama3", needs_original_length=True, settings=SETTINGS, relations=relations)
def llama3(
    spec: RopeSpec,
    *,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> tuple[torch.Tensor, float]:
    """Llama 3.1 wavelength bands: short λ keep θ, long λ get θ/s, smooth blend in between."""
    lff, hff = low_freq_factor, high_freq_factor
    theta = spec.theta()
    s, length = spec.factor, spec.original_length
    wavelen = 2 * math.pi / theta
    smooth = (length / wavelen - lff) / (hff - lff)
    blended = (1.0 - smooth) * theta / s + smooth * theta
    inv_freq = torch.where(
        wavelen < length / hff,
        theta,
        torch.where(wavelen > length / lff, theta / s, blended),
    )
    return inv_freq, 1.0
