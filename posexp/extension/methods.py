"""The RoPE context-extension methods of docs/maths.md §3, one registered function each.

Each function takes a validated RopeSpec plus its own keyword-only params (whose defaults the
registry reads as the method's allowed params) and returns (float64 inv_freq, attention_factor).
s = spec.factor, d = spec.head_dim, L0 = spec.original_length.
"""

from __future__ import annotations

import math

import torch

from posexp.errors import PosexpError
from posexp.extension.registry import RopeSpec, as_number, register_extension


def _ntk_exponent(spec: RopeSpec, method: str) -> float:
    # d/(d-2) makes the lowest frequency scale by exactly 1/s (YaRN paper Eq. 16); undefined at d=2.
    if spec.head_dim < 4:
        raise PosexpError(f"extension {method!r} needs head_dim >= 4, got {spec.head_dim}")
    return spec.head_dim / (spec.head_dim - 2)


@register_extension("none", acts_on="nothing")
def none(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """Plain RoPE frequencies θ_i = base^(-2i/d)."""
    return spec.theta(), 1.0


@register_extension("pi", acts_on="positions")
def pi(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """Position interpolation: θ/s, the same as feeding positions m/s."""
    return spec.theta() / spec.factor, 1.0


@register_extension("ntk")
def ntk(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """Static NTK-aware scaling: base' = base·s^(d/(d-2))."""
    return spec.theta(spec.base * spec.factor ** _ntk_exponent(spec, "ntk")), 1.0


@register_extension("dynamic_ntk", dynamic=True, needs_original_length=True)
def dynamic_ntk(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """NTK scaling recomputed for the current length l: base' = base·(s·l/L0 − (s−1))^(d/(d−2))."""
    exponent = _ntk_exponent(spec, "dynamic_ntk")
    length = spec.seq_len if spec.seq_len is not None else spec.original_length
    if length <= spec.original_length:
        # Within the training length the model must see exactly the frequencies it was trained on.
        return spec.theta(), 1.0
    s = spec.factor
    return spec.theta(spec.base * (s * length / spec.original_length - (s - 1)) ** exponent), 1.0


def _yarn_correction_dim(spec: RopeSpec, rotations: float) -> float:
    # Index of the dimension that turns `rotations` times over the training length.
    return (
        spec.head_dim
        * math.log(spec.original_length / (2 * math.pi * rotations))
        / (2 * math.log(spec.base))
    )


@register_extension("yarn", needs_original_length=True)
def yarn(
    spec: RopeSpec,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    attention_factor: float | None = None,
) -> tuple[torch.Tensor, float]:
    """YaRN: ramp from θ (fast pairs) to θ/s (slow pairs) plus attention factor 0.1·ln(s)+1."""
    beta_fast = as_number("beta_fast", beta_fast)
    beta_slow = as_number("beta_slow", beta_slow)
    if beta_slow <= 0:
        raise PosexpError(f"beta_slow must be > 0, got {beta_slow}")
    if beta_fast <= beta_slow:
        # A swapped pair silently inverts the ramp (torchtitan #3787), so refuse it.
        raise PosexpError(
            f"beta_fast must be > beta_slow, got beta_fast={beta_fast}, beta_slow={beta_slow}"
        )
    d, s = spec.head_dim, spec.factor
    lo = min(max(math.floor(_yarn_correction_dim(spec, beta_fast)), 0), d - 1)
    hi = min(max(math.ceil(_yarn_correction_dim(spec, beta_slow)), 0), d - 1)
    if hi == lo:
        hi += 0.001  # a one-index range would divide by zero
    ramp = ((torch.arange(d // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0.0, 1.0)
    theta = spec.theta()
    inv_freq = (theta / s) * ramp + theta * (1.0 - ramp)

    if attention_factor is None:
        attention_factor = 0.1 * math.log(s) + 1.0 if s > 1 else 1.0
    else:
        attention_factor = as_number("attention_factor", attention_factor)
        if attention_factor <= 0:
            raise PosexpError(f"attention_factor must be > 0, got {attention_factor}")
    return inv_freq, attention_factor


@register_extension("llama3", needs_original_length=True)
def llama3(
    spec: RopeSpec,
    *,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> tuple[torch.Tensor, float]:
    """Llama 3.1 wavelength bands: short λ keep θ, long λ get θ/s, smooth blend in between."""
    lff = as_number("low_freq_factor", low_freq_factor)
    hff = as_number("high_freq_factor", high_freq_factor)
    if not 0 < lff < hff:
        raise PosexpError(
            f"need 0 < low_freq_factor < high_freq_factor, got low_freq_factor={lff}, "
            f"high_freq_factor={hff}"
        )
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
