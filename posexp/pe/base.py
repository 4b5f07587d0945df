"""The interface every positional encoding implements, and the registry that names them.

A positional encoding can act at three points of a decoder, and each subclass overrides only
the hooks it needs (all default to "do nothing"):

* ``embed``   adds position information to the token embeddings (sinusoidal, learned);
* ``rotate``  transforms queries and keys per head (RoPE);
* ``bias``    returns an additive attention-logit bias (ALiBi).

Positions are integer tensors of shape ``(T,)`` shared by the batch, or ``(B, T)`` per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from posexp.errors import PosexpError
from posexp.extension import position_scale


@dataclass
class PEContext:
    """What every positional encoding may need to know about the model it sits in."""

    d_model: int
    n_heads: int
    head_dim: int
    train_length: int
    extension: dict[str, Any] = field(default_factory=dict)


class PositionalEncoding(nn.Module):
    """Base class: no position information at all (NoPE behaviour)."""

    name: ClassVar[str] = ""
    # True when the attention needs ``bias``; SDPA then cannot use its is_causal fast path.
    has_bias: ClassVar[bool] = False
    # True when cached keys must be stored before rotation and re-rotated each step, because
    # the rotation depends on the current length (dynamic NTK).
    rotates_cached_keys: bool = False

    def __init__(self, ctx: PEContext) -> None:
        super().__init__()
        self.ctx = ctx

    def prepare(self, length: int, device: torch.device) -> None:
        """Called once per forward with 1 + the largest position, before any other hook."""

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Return token embeddings ``x`` (B, T, d) with position information added."""
        return x

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return queries and keys (B, H, T, head_dim) with position information applied."""
        return q, k

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Return the additive logit bias (H, Tq, Tk) or (B, H, Tq, Tk), causal part excluded."""
        raise NotImplementedError


PE_REGISTRY: dict[str, type[PositionalEncoding]] = {}


def register_pe(name: str):
    """Class decorator that registers a positional encoding under ``name``."""

    def wrap(cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
        cls.name = name
        PE_REGISTRY[name] = cls
        return cls

    return wrap


def build_pe(name: str, ctx: PEContext, **params: Any) -> PositionalEncoding:
    """Instantiate the positional encoding registered as ``name``."""
    if name not in PE_REGISTRY:
        raise PosexpError(f"unknown pe {name!r}; allowed: {', '.join(sorted(PE_REGISTRY))}")
    return PE_REGISTRY[name](ctx, **params)




def position_divisor(extension: dict[str, Any]) -> float:
    """How much an absolute-position encoding divides positions by: s under PI, else 1."""
    return 1.0 / position_scale(extension.get("method", "none"), extension.get("factor", 1.0))
