"""The kernels a model runs on (``KernelChoice``): chosen where a run or an evaluation starts
(``posexp.runtime.kernel_choice`` resolves ``auto``), handed to the model, never saved with its
weights, so a checkpoint does not change when a faster kernel appears."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from posexp.errors import PosexpError, choose
from posexp.kernels import flex
from posexp.kernels.matmul_attention import KERNELS as CAUSAL_KERNELS
from posexp.kernels.onednn_linear import KERNELS as LINEAR_KERNELS


@dataclass(frozen=True)
class KernelChoice:
    """What runs attention and the linear layers; every value is concrete (no ``auto`` but the
    bias backend's, which each call decides by its device and gradient, ``flex.use_flex``).

    ``bias``: a position bias's kernel (auto, cpp, flex, sdpa; ``attention.backend``).
    ``causal``: causal attention while training in 16-bit (sdpa, matmul; ``attention.causal``).
    ``linear``: the linear layers' product in fp32 on a CPU (torch, onednn; ``train.linear``).
    """

    bias: str = "auto"
    causal: str = "sdpa"
    linear: str = "torch"

    def __post_init__(self) -> None:
        choose("attention backend", self.bias, flex.BACKENDS)
        choose("causal kernel", self.causal, CAUSAL_KERNELS)
        choose("linear kernel", self.linear, LINEAR_KERNELS)
        if self.bias == "flex" and not flex.available():
            raise PosexpError(
                "attention=flex needs torch.nn.attention.flex_attention (torch >= 2.5); "
                "allowed here: auto, cpp, sdpa"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (a checkpoint's meta, beside the model, for an exact resume)."""
        return asdict(self)


DEFAULT = KernelChoice()  # what a model runs on until told otherwise
