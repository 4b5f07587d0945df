"""Training-free methods that change attention itself rather than RoPE's frequencies.

Such a method (Self-Extend, ReRoPE, log-length scaling, blockwise causal attention; one module
each in ``methods/``) builds
an ``AttentionPlan`` once per model from its params and the training length L0:

* ``window`` and ``far``: query-key pairs closer than ``window`` keep their positions; every
  other pair is rotated at the positions ``far(q_pos, k_pos)`` gives instead (a remapped relative
  distance, so only rotations take it);
* ``query_scale``: a per-query multiplier of the logits, applied by scaling the query vector;
* ``classes`` and ``rotations``: the general form of ``far``: each pair falls in a class, kept
  (0), rotated at one of several remapped positions (1, 2, ...), or hidden (-1): a Λ-shaped mask
  (StreamingLLM, LM-Infinite), chunk-relative positions (Dual Chunk Attention), shifted ones
  (STRING); ``window_sinks`` declares classes that are a window plus sinks, for a faster kernel;
* ``block``: a query at position p sees only the keys of blocks ⌊p/block⌋ − 1 and ⌊p/block⌋
  (blockwise causal attention), through ``posexp.model.attention.block_local_attention``.

The model (posexp/model/gpt.py) applies the plan; ``posexp.model.attention.remapped_attention`` is the
kernel. Nothing here is trained, so no run trains with these methods (posexp/config/run.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from posexp.errors import PosexpError
from posexp.extension.registry import RopeSpec, register_extension
from posexp.extension.settings import Setting

# (q_pos (Tq,), k_pos (Tk,)) -> float positions for the far pairs: (Tq,) for queries, (Tk,) keys.
FarPositions = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class AttentionSpec:
    """What a plan may depend on: the factor s (target length / L0) and the training length L0."""

    factor: float
    original_length: int


@dataclass(frozen=True)
class AttentionPlan:
    """How one training-free method changes attention (see the module docstring)."""

    window: int | None = None
    far: FarPositions | None = None
    query_scale: Callable[[torch.Tensor], torch.Tensor] | None = None
    block: int | None = None
    # Each pair's class (``classes(q_pos, k_pos)`` -> integer (Tq, Tk)): 0 keeps its positions,
    # n >= 1 is rotated at ``rotations[n - 1](q_pos, k_pos)``, -1 is not seen (StreamingLLM,
    # LM-Infinite, Dual Chunk Attention, STRING).
    classes: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    rotations: tuple[FarPositions, ...] = ()
    # (W, S) where ``classes`` is exactly a window and sinks: class 0 for 0 <= i - j < W, class 1
    # for a key at a position below S outside it, -1 else (StreamingLLM, LM-Infinite). A kernel
    # then attends over the band and the S sinks apart, in O(L·(W + S)) (``banded_classes``).
    window_sinks: tuple[int, int] | None = None

    @property
    def remaps_positions(self) -> bool:
        """True when some pairs are rotated at other positions than their own."""
        return self.far is not None or self.classes is not None


def _unchanged(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    # The rotation inside the window is plain RoPE.
    return spec.theta(), 1.0


def register_attention_method(
    name: str,
    *,
    acts_on: str,
    uses_factor: bool = True,
    settings: tuple[Setting, ...] = (),
    caveat: str | None = None,
) -> Callable[[Callable[..., AttentionPlan]], Callable[..., AttentionPlan]]:
    """Register ``fn(spec: AttentionSpec, *, param=default, ...) -> AttentionPlan`` as ``name``,
    with ``settings`` declaring its keyword-only params (``caveat``: what reports say of it)."""

    def decorate(fn: Callable[..., AttentionPlan]) -> Callable[..., AttentionPlan]:
        register_extension(
            name,
            acts_on=acts_on,
            needs_original_length=True,
            settings=settings,
            attention=fn,
            uses_factor=uses_factor,
            caveat=caveat,
        )(_unchanged)
        return fn

    return decorate


def window_size(window: int | None, default: int, original_length: int) -> int:
    """The window of a position-remapping method: ``default`` when null, always below L0 (the
    distances it keeps must be ones training saw)."""
    w = default if window is None else window
    if not 1 <= w < original_length:
        raise PosexpError(
            f"extension.window must be in [1, {original_length - 1}] (below the training length "
            f"{original_length}), got {w}"
        )
    return w


def log_length_scale(positions: torch.Tensor, original_length: int) -> torch.Tensor:
    """max(1, log_L0(p + 1)) per query position p: the "log n" temperature beyond L0."""
    n = positions.double() + 1.0
    return (n.log() / torch.log(torch.tensor(float(original_length)))).clamp(min=1.0)
