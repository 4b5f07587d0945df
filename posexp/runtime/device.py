"""Which torch device a run uses."""

from __future__ import annotations

import torch

from posexp.config import DEVICES
from posexp.errors import PosexpError, choose


def resolve_device(name: str, gpu: int | None = None) -> torch.device:
    """auto picks cuda, then mps, then cpu; an explicit device must exist.

    ``gpu``: the CUDA device index to use (a sweep job's placement, a torchrun local rank); it
    becomes the current device before CUDA is first used, so no context lands on GPU 0.
    """
    choose("device", name, DEVICES)
    if gpu is not None and name in ("auto", "cuda") and torch.cuda.is_available():
        torch.cuda.set_device(gpu)
        return torch.device("cuda", gpu)
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise PosexpError("device 'cuda' requested but no CUDA GPU is visible; allowed here: auto, cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise PosexpError("device 'mps' requested but MPS is not available; allowed here: auto, cpu")
    return torch.device(name)
