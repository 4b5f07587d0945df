"""The interface every positional encoding implements, and the registry that names them.

A positional encoding can act at three points of a decoder, and each subclass overrides only
the hooks it needs (all default to "do nothing"):

* ``embed``   adds position information to the token embeddings (sinusoidal, learned);
* ``rotate``  transforms queries and keys per head (RoPE);
* ``bias``    returns an additive attention-logit bias (ALiBi, T5).

Each encoding declares its own constraints as class attributes, so no other module names it:
``kind`` (none, embedding, rotation or bias), the kinds of extension method it takes
(``accepts``; by default derived from its kind), and whether it needs an even head dim. A
config-level check (e.g. a maximum length) goes in ``check_params``. Positions are integer
tensors of shape ``(T,)`` shared by the batch, or ``(B, T)`` per row.

A new encoding is one module in this package, found by name when the package is imported,
plus ``configs/pe/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from posexp.errors import PosexpError
from posexp.extension import EXTENSIONS, get_extension, position_scale

KINDS = ("none", "embedding", "rotation", "bias")
# What the extension methods may change, for each kind (see posexp/extension/registry.py).
ACCEPTS_BY_KIND = {
    "none": frozenset(), "bias": frozenset(), "embedding": frozenset({"positions"}),
    "rotation": frozenset({"positions", "frequencies"}),
}


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
    kind: ClassVar[str] = "none"
    # What extension methods may change for this encoding (None: what its kind allows).
    accepts: ClassVar[frozenset[str] | None] = None
    needs_even_head_dim: ClassVar[bool] = False
    # True when cached keys must be stored before rotation and re-rotated each step, because
    # the rotation depends on the current length (dynamic NTK).
    rotates_cached_keys: bool = False

    def __init__(self, ctx: PEContext) -> None:
        super().__init__()
        self.ctx = ctx

    @property
    def has_bias(self) -> bool:
        """True when attention needs ``bias``; SDPA then cannot use its is_causal fast path."""
        return self.kind == "bias"

    @classmethod
    def accepted(cls) -> frozenset[str]:
        """What extension methods may change for this encoding."""
        return ACCEPTS_BY_KIND[cls.kind] if cls.accepts is None else cls.accepts

    @property
    def max_positions(self) -> int | None:
        """How many positions the encoding can represent; None when any number."""
        return None

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """Refuse settings that cannot work at training length ``seq_len`` (one-line errors)."""

    @classmethod
    def position_limit(cls, params: dict[str, Any], seq_len: int) -> int | None:
        """How many positions these settings can represent (a learned table's rows); None: any."""
        return None

    def prepare(self, length: int, device: torch.device) -> Any:
        """Per-forward state for positions below ``length`` (RoPE: its cos/sin tables), or None.

        Called once per forward; what it returns is handed to ``rotate`` by the attention of
        every layer, so the encoding keeps no hidden state between calls.
        """
        return None

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Return token embeddings ``x`` (B, T, d) with position information added."""
        return x

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
        state: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return queries and keys (B, H, T, head_dim) with position information applied."""
        return q, k

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Return the additive logit bias (H, Tq, Tk) or (B, H, Tq, Tk), causal part excluded."""
        raise NotImplementedError

    def score_mod(self) -> Callable[..., torch.Tensor] | None:
        """The bias as FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx)``, where query and
        key positions equal their indices; None: attention takes the ``bias`` path."""
        return None


PE_REGISTRY: dict[str, type[PositionalEncoding]] = {}


def register_pe(name: str) -> Callable[[type[PositionalEncoding]], type[PositionalEncoding]]:
    """Class decorator that registers a positional encoding under ``name``."""

    def wrap(cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
        if name in PE_REGISTRY:
            raise ValueError(f"pe {name!r} registered twice")
        if cls.kind not in KINDS:
            raise ValueError(f"pe {name!r}: kind must be one of {KINDS}, got {cls.kind!r}")
        cls.name = name
        PE_REGISTRY[name] = cls
        return cls

    return wrap


def get_pe(name: str) -> type[PositionalEncoding]:
    """The encoding class registered as ``name`` (a one-line error listing the names if none)."""
    if name not in PE_REGISTRY:
        raise PosexpError(f"unknown pe {name!r}; allowed: {', '.join(sorted(PE_REGISTRY))}")
    return PE_REGISTRY[name]


def build_pe(name: str, ctx: PEContext, **params: Any) -> PositionalEncoding:
    """Instantiate the positional encoding registered as ``name``."""
    return get_pe(name)(ctx, **params)


def accepted_extensions(pe: str) -> list[str]:
    """The extension methods ``pe`` can take, in registry order (always including none)."""
    accepts = get_pe(pe).accepted()
    return [name for name, m in EXTENSIONS.items() if m.acts_on == "nothing" or m.acts_on in accepts]


def check_extension(pe: str, method: str) -> None:
    """One rule for every command: a method the encoding cannot take is an error naming those it can."""
    get_extension(method)
    allowed = accepted_extensions(pe)
    if method not in allowed:
        kind = get_pe(pe).kind
        raise PosexpError(f"extension {method!r} does not apply to pe {pe!r} ({kind}); "
                          f"allowed for {pe}: {', '.join(allowed)}")




def position_divisor(extension: dict[str, Any]) -> float:
    """How much an absolute-position encoding divides positions by: s under PI, else 1."""
    return 1.0 / position_scale(extension.get("method", "none"), extension.get("factor", 1.0))
