"""Where a job of a parallel sweep runs: its GPU and its CPU thread count.

Hydra's launchers schedule the jobs (joblib on this box, submitit locally or on Slurm); this
module only decides, inside each job, which device and how many CPU threads it uses, so that
parallel jobs neither pile onto one GPU nor oversubscribe the cores.

* GPU: round-robin over the visible GPUs by the job's number (``hydra.job.num``): job k uses
  GPU ``k % n_gpus``. With ``hydra/launcher=joblib`` the default ``n_jobs`` is
  ``n_gpus x placement.jobs_per_gpu`` (several small jobs may share a GPU), so the jobs in
  flight at once spread evenly. ``device=auto`` (or ``cuda``) then means that GPU.
* CPU threads (``train.threads: null``): ``cores // n_jobs`` for joblib, ``cpus_per_task`` for
  submitit (1 when unset for submitit_local, which starts every job at once), ``cores //
  processes`` under torchrun; a sequential sweep or a single run keeps torch's default.
  An explicit ``train.threads`` always wins.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from posexp.config import RunConfig
from posexp.runtime.hardware import gpu_count, usable_cores

log = logging.getLogger("posexp")

# Our presets in configs/hydra/launcher/ share their names with the plugins' ConfigStore entries
# (so `hydra/launcher=joblib` picks them up), and Hydra then validates them against those
# schemas, which is what we want, but it warns about it on every sweep. The presets are complete
# configs, so they keep working once Hydra drops the matching.
warnings.filterwarnings(
    "ignore", message=r"(?s).*is validated against ConfigStore schema with the same name"
)

LAUNCHERS = {
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher": "basic",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher": "joblib",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher": "submitit_local",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher": "submitit_slurm",
}


@dataclass(frozen=True)
class Placement:
    """A job's GPU index among the visible ones (None: leave the choice to ``device``) and threads."""

    gpu: int | None = None
    threads: int | None = None
    note: str | None = None  # a warning worth logging (more jobs in flight than GPU slots)


def joblib_parallelism(n_jobs: Any, cores: int) -> int:
    """How many jobs joblib runs at once for ``n_jobs`` (joblib's rule: -1 = all cores, -2 = all but one)."""
    if n_jobs is None or int(n_jobs) == 0:
        return 1
    n = int(n_jobs)
    return n if n > 0 else max(1, cores + 1 + n)


def launcher_kind(launcher: dict[str, Any]) -> str:
    """basic | joblib | submitit_local | submitit_slurm | other, from the launcher's _target_."""
    return LAUNCHERS.get(str(launcher.get("_target_", "")), "other")


def plan(
    *,
    multirun: bool,
    job_num: int,
    launcher: dict[str, Any],
    n_gpus: int,
    cores: int,
    jobs_per_gpu: int = 1,
    threads: int | None = None,
    local_world_size: int = 1,
) -> Placement:
    """Pure placement rule (unit-tested with fake GPU and core counts); see the module docstring."""
    if (
        local_world_size > 1
    ):  # torchrun: the GPU is the local rank's (set by posexp.runtime.distributed)
        return Placement(None, threads or max(1, cores // local_world_size))
    if not multirun:
        return Placement(None, threads)
    kind = launcher_kind(launcher)
    if kind == "basic":  # one job at a time: nothing to share
        return Placement(None, threads)
    gpu = job_num % n_gpus if n_gpus else None
    in_flight: int | None = None
    if kind == "joblib":
        in_flight = joblib_parallelism(launcher.get("n_jobs"), cores)
        auto_threads = max(1, cores // in_flight)
    elif kind in ("submitit_local", "submitit_slurm"):
        cpus = launcher.get("cpus_per_task") or os.environ.get("SLURM_CPUS_PER_TASK")
        auto_threads = int(cpus) if cpus else (1 if kind == "submitit_local" else None)
    else:
        auto_threads = None
    note = None
    slots = n_gpus * max(1, int(jobs_per_gpu))
    if gpu is not None and in_flight is not None and in_flight > slots:
        note = (
            f"{in_flight} jobs in flight on {n_gpus} GPU(s) with placement.jobs_per_gpu="
            f"{jobs_per_gpu}: up to {-(-in_flight // n_gpus)} jobs share a GPU"
        )
    return Placement(gpu, threads or auto_threads, note)


def job_placement(cfg: RunConfig, local_world_size: int = 1) -> Placement:
    """This job's placement, from Hydra's runtime config and the machine."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    threads = cfg.train.threads
    hc = HydraConfig.get() if HydraConfig.initialized() else None
    launcher = (
        {k: _launcher_setting(hc, k) for k in ("_target_", "n_jobs", "cpus_per_task")} if hc else {}
    )
    return plan(
        multirun=hc is not None and hc.mode == RunMode.MULTIRUN,
        job_num=int(hc.job.get("num") or 0) if hc else 0,
        launcher=launcher,
        n_gpus=gpu_count(),
        cores=usable_cores(),
        jobs_per_gpu=cfg.placement.jobs_per_gpu,
        threads=int(threads) if threads else None,
        local_world_size=local_world_size,
    )


def _launcher_setting(hc: Any, key: str) -> Any:
    """``hydra.launcher.<key>`` resolved, or None (absent, or not resolvable in this process)."""
    try:
        return OmegaConf.select(hc, f"launcher.{key}", default=None)
    except Exception:  # noqa: BLE001  placement must never fail a job
        return None


def apply_threads(placement: Placement) -> None:
    """Set torch's intra-op thread count if the placement fixes one."""
    import torch

    if placement.threads:
        torch.set_num_threads(int(placement.threads))
    if placement.note:
        log.warning(placement.note)
