"""Which torch device a run uses, how many CPU threads, and host-to-device copies."""

from __future__ import annotations

import logging

import torch

from posexp.config import DEVICES, RunConfig
from posexp.errors import PosexpError, choose
from posexp.runtime import distributed
from posexp.runtime.placement import apply_threads, job_placement

log = logging.getLogger("posexp")


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
        raise PosexpError(
            "device 'cuda' requested but no CUDA GPU is visible; allowed here: auto, cpu"
        )
    if name == "mps" and not torch.backends.mps.is_available():
        raise PosexpError(
            "device 'mps' requested but MPS is not available; allowed here: auto, cpu"
        )
    return torch.device(name)


def place(cfg: RunConfig) -> torch.device:
    """The run's device and CPU threads: torchrun's local rank, or a sweep job's placement."""
    env = distributed.env() if distributed.active() else distributed.DistEnv()
    where = job_placement(cfg, env.local_world_size)
    apply_threads(where)
    device = resolve_device(cfg.device, gpu=env.local_rank if env.enabled else where.gpu)
    if where.gpu is not None or where.threads:
        threads = torch.get_num_threads()
        log.info("placement: %s, %d CPU thread%s", device, threads, "" if threads == 1 else "s")
    return device


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host-to-device copy: from pinned memory and asynchronous on CUDA."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)
