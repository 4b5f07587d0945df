"""What this machine offers a job: usable CPU cores, visible GPUs (no other posexp import)."""

from __future__ import annotations

import os
import re
import warnings

# A CUDA build of torch on a machine without a usable driver warns at its first CUDA query: two
# lines on stderr before whatever the command says. Where a command needs a GPU it says "no CUDA
# GPU is visible" in one line (posexp/runtime/device.py); elsewhere CPU is the answer.
warnings.filterwarnings("ignore", message=r"CUDA initialization", category=UserWarning)


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


# Compiled up front: after a failed allocation there may be no memory left to compile it.
ALLOCATION = re.compile(r"allocate (\d+ bytes|[\d.]+ [KMGTP]i?B)")


def out_of_memory(e: BaseException) -> str | None:
    """``out of memory (tried to allocate 24.6 GiB)`` if ``e`` is a failed allocation, else None."""
    # numpy's MemoryError, torch's CPU allocator, CUDA: a size the machine cannot hold is the
    # user's input, so a command says so in one line instead of a traceback.
    text = str(e)
    oom = (
        isinstance(e, MemoryError)
        or type(e).__name__ == "OutOfMemoryError"
        or "can't allocate memory" in text
        or "out of memory" in text.lower()
    )
    if not oom:
        return None
    size = ALLOCATION.search(text)
    shown = size.group(1) if size else None
    if shown and shown.endswith(" bytes"):
        n = int(shown.split()[0])
        # A small last allocation is not the cause (memory ran out before it): leave it out.
        shown = (
            None if n < 2**20 else f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"
        )
    return f"out of memory (tried to allocate {shown})" if shown else "out of memory"


def available_memory(device_type: str = "cpu") -> int | None:
    """Bytes free for new tensors on ``device_type`` (cuda: the current GPU; cpu: Linux's
    MemAvailable); None where this cannot be read."""
    if device_type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
