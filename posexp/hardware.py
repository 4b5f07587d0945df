"""What this machine offers a job: usable CPU cores, visible GPUs (no other posexp import)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a Slurm allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def gpu_count() -> int:
    """Visible CUDA devices (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_n_jobs(jobs_per_gpu: int, n_gpus: int | None = None, cores: int | None = None) -> int:
    """joblib's default n_jobs: GPUs x jobs_per_gpu on a GPU box, else one job per core."""
    n_gpus = gpu_count() if n_gpus is None else n_gpus
    if n_gpus:
        return n_gpus * max(1, int(jobs_per_gpu))
    return usable_cores() if cores is None else cores
