"""Data-parallel training under torchrun: ``torchrun --nproc_per_node=N -m posexp train ...``.

One run across N processes (NCCL on CUDA, gloo on CPU). Every rank builds the same GLOBAL batch
for a step (batches are a pure function of seed and step) and trains on its contiguous block of
rows; DDP averages the gradients, and each rank's loss is weighted so that the average equals
the gradient of the global batch's mean loss (exactly, also when rows hold different numbers of
scored tokens). The run is thus equivalent to one process with the same ``train.batch_size``.

Rank 0 alone writes the run dir (TensorBoard, checkpoints, results.json, logs) and evaluates; all
ranks use rank 0's run dir (``agree_on_run_dir``). Outside torchrun (or with one process) every
helper here is a no-op, so the training code calls them unconditionally.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger("posexp")

# Ranks wait for rank 0 while it evaluates or writes the final results (a full test-set BLEU can
# take minutes): a generous collective timeout instead of NCCL's 10 minute default.
TIMEOUT = timedelta(hours=2)


@dataclass(frozen=True)
class DistEnv:
    """This process's place in a torchrun job (rank 0 of 1 outside torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env() -> DistEnv:
    """Read torchrun's environment variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)."""
    e = os.environ
    world = int(e.get("WORLD_SIZE", 1))
    return DistEnv(
        rank=int(e.get("RANK", 0)),
        world_size=world,
        local_rank=int(e.get("LOCAL_RANK", 0)),
        local_world_size=int(e.get("LOCAL_WORLD_SIZE", world)),
    )


def active() -> bool:
    """Whether a process group is up (i.e. this is a multi-process run)."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank (0 outside torchrun)."""
    return dist.get_rank() if active() else 0


def world_size() -> int:
    """Processes in the job (1 outside torchrun)."""
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """True on rank 0, and always outside torchrun."""
    return rank() == 0


def init(device: str = "auto") -> DistEnv:
    """Join torchrun's process group: NCCL when training on CUDA, else gloo. No-op for 1 process."""
    e = env()
    if not e.enabled or active():
        return e
    use_cuda = device in ("auto", "cuda") and torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(e.local_rank)
    backend = "nccl" if use_cuda and dist.is_nccl_available() else "gloo"
    dist.init_process_group(backend=backend, timeout=TIMEOUT)
    if not e.is_main:
        logging.getLogger("posexp").setLevel(logging.WARNING)  # rank 0 reports progress
    return e


def cleanup(wait: bool = True) -> None:
    """Leave the process group; ``wait``: first let every rank get here (rank 0 wrote its results)."""
    if active():
        if wait:
            dist.barrier()
        dist.destroy_process_group()


@contextlib.contextmanager
def session(device: str = "auto") -> Iterator[DistEnv]:
    """``init`` ... ``cleanup`` around a run; after an error, leave without waiting for the others."""
    e = init(device)
    try:
        yield e
    except BaseException:
        cleanup(wait=False)
        raise
    cleanup()


def barrier() -> None:
    """Wait for every rank (nothing to wait for outside torchrun)."""
    if active():
        dist.barrier()


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@contextlib.contextmanager
def rank_zero_first() -> Iterator[None]:
    """Rank 0 runs the body first (e.g. builds shared caches), the others after it finished."""
    if not is_main():
        barrier()
    yield
    if is_main():
        barrier()


def agree_on_run_dir(run_dir: Path, file_handlers: bool = True) -> Path:
    """Rank 0's run dir for every rank; other ranks remove the dir their own Hydra created.

    Each torchrun process runs Hydra, which names a fresh run dir from ``${now:...}`` in that
    process, so the ranks may disagree by a second. Non-zero ranks also stop writing the run's
    log file (rank 0 keeps it).
    """
    if not active():
        return run_dir
    main_dir = Path(broadcast_object(str(run_dir)))
    if is_main():
        return main_dir
    if file_handlers:
        detach_file_logging()
    if run_dir.resolve() != main_dir.resolve():
        remove_stray_dir(run_dir)
    return main_dir


def detach_file_logging() -> None:
    """Close and drop every logging FileHandler (Hydra's ``<run dir>/<job>.log``)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler):
            root.removeHandler(handler)
            handler.close()


def remove_stray_dir(run_dir: Path) -> None:
    """Remove a dir Hydra made for this rank, if it holds nothing but Hydra's own files."""
    allowed = {".hydra"} | {p.name for p in run_dir.glob("*.log")}
    if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= allowed:
        shutil.rmtree(run_dir, ignore_errors=True)


def shard(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    """This rank's block of the global batch and its loss weight (None outside torchrun)."""
    if not active():
        return x, y, None
    return shard_rows(x, y, rank(), world_size())


def shard_rows(
    x: torch.Tensor, y: torch.Tensor, rank: int, world: int
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Rows ``rank``-th of ``world`` contiguous blocks, and the loss weight ``world * n_r / N``.

    n_r = scored targets (not -100) in the block, N = in the global batch: the average over
    ranks of ``weight * grad(mean loss of the block)`` is the gradient of the global mean loss.
    """
    rows = x.shape[0] // world
    xs, ys = x[rank * rows : (rank + 1) * rows], y[rank * rows : (rank + 1) * rows]
    total = int((y != -100).sum())
    weight = world * int((ys != -100).sum()) / total if total else 0.0
    return xs, ys, weight


def global_mean(local_mean: torch.Tensor, weight: float | None) -> float:
    """The global batch's mean loss from each rank's mean and ``shard``'s weight (a collective)."""
    if weight is None or not active():
        return float(local_mean)
    t = (local_mean.detach().float() * weight).reshape(1)
    dist.all_reduce(t)
    return float(t) / world_size()


def global_max(value: int, device: torch.device) -> int:
    """The largest of every rank's ``value`` (a collective); ``value`` itself without torchrun."""
    if not active():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def check_batch_size(batch_size: int) -> None:
    """The global batch must split evenly over the ranks."""
    from posexp.errors import PosexpError

    w = world_size()
    if batch_size % w:
        raise PosexpError(
            f"train.batch_size={batch_size} does not split over {w} processes; "
            f"allowed: a multiple of {w} (it is the global batch)"
        )


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DistributedDataParallel around ``model`` when running under torchrun, else ``model``."""
    if not active():
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def reseed(seed: int, step: int) -> None:
    """Give non-zero ranks their own dropout stream (rank 0 keeps the single-process one)."""
    if active() and not is_main():
        torch.manual_seed(hash((seed, rank(), step)) & 0x7FFF_FFFF)


class NullWriter:
    """Stands in for SummaryWriter on non-zero ranks: every method does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None
