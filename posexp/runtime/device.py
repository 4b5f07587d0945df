"""Which torch device a run uses, how many CPU threads, and host-to-device copies."""

from __future__ import annotations

import logging
import os

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


# cuBLAS workspace settings under which its matmuls repeat bit for bit (NVIDIA's cuBLAS docs,
# "Results reproducibility"); torch refuses a deterministic matmul under any other.
CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")


def set_cublas_workspace() -> None:
    """``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless it holds a deterministic setting already."""
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") in CUBLAS_DETERMINISTIC:
        return
    if torch.cuda.is_initialized():
        # torch reads the variable once, for this process's first cuBLAS handle.
        log.warning(
            "train.deterministic=true after CUDA started in this process: cuBLAS may keep "
            "its workspace; run the job in a fresh process for bit-for-bit results"
        )
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_DETERMINISTIC[0]


def set_deterministic(on: bool) -> None:
    """``train.deterministic``: torch's deterministic kernels on or off for this process.

    On: ``torch.use_deterministic_algorithms(True)`` (an op without a deterministic kernel
    raises instead of running one that is not), cuDNN's deterministic algorithms without
    autotuning, and a fixed cuBLAS workspace (``set_cublas_workspace``). Off sets them back, as
    a joblib worker may run a deterministic job before this one.
    """
    if on:
        set_cublas_workspace()
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    if on:
        torch.backends.cudnn.benchmark = False  # autotuning may pick another kernel per run


def place(cfg: RunConfig) -> torch.device:
    """The run's device and CPU threads: torchrun's local rank, or a sweep job's placement;
    deterministic kernels where ``train.deterministic`` asks, set before CUDA's first use."""
    set_deterministic(cfg.train.deterministic)
    env = distributed.env() if distributed.active() else distributed.DistEnv()
    where = job_placement(cfg, env.local_world_size)
    apply_threads(where)
    device = resolve_device(cfg.device, gpu=env.local_rank if env.enabled else where.gpu)
    if where.gpu is not None or where.threads:
        threads = torch.get_num_threads()
        log.info("placement: %s, %d CPU thread%s", device, threads, "" if threads == 1 else "s")
    return device


def check_resume_threads(recorded: int | None, device: torch.device) -> None:
    """Warn where a CPU run resumes on another thread count than its checkpoint was saved on
    (``recorded``; None: not recorded): torch splits fp32 reductions across threads, so the
    resumed weights then differ in their last bits from an uninterrupted run's."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or recorded is None or recorded == threads:
        return
    log.warning(
        "this run was checkpointed on %d CPU thread%s and resumes on %d: its weights will "
        "differ in the last bits from an uninterrupted run's; train.threads=%d resumes exactly",
        recorded,
        "" if recorded == 1 else "s",
        threads,
        recorded,
    )


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host-to-device copy: from pinned memory and asynchronous on CUDA."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)
