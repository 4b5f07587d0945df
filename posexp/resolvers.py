"""The OmegaConf resolvers posexp's YAML files use, registered in one place.

``posexp.paths.config_dir()`` registers them, so every way of composing posexp's configs (the
CLI, a test, a notebook with ``hydra.compose``) has them, whatever was imported before.
"""

from __future__ import annotations

import hashlib
from typing import Any

from omegaconf import OmegaConf


def run_dir(resume: Any, fresh: str) -> str:
    """``hydra.run.dir``: the run being resumed, else a new timestamped dir."""
    return str(resume) if resume not in (None, "", "None") else fresh


def job_dir(override_dirname: str, limit: int = 120) -> str:
    """``hydra.sweep.subdir``: the overrides, shortened with a stable hash past ``limit`` characters.

    File names stop at 255 bytes; a sweep with many overrides would otherwise fail to start. The
    hash keeps the name stable, so rerunning the sweep finds (and skips) finished jobs.
    """
    if len(override_dirname) <= limit:
        return override_dirname or "default"
    digest = hashlib.sha256(override_dirname.encode()).hexdigest()[:10]
    return f"{override_dirname[: limit - 11]}_{digest}"


def n_jobs(*, _root_: Any) -> int:
    """``${posexp_n_jobs:}``: joblib's default n_jobs for the config's placement.jobs_per_gpu."""
    from posexp.hardware import default_n_jobs

    return default_n_jobs(int(OmegaConf.select(_root_, "placement.jobs_per_gpu", default=1) or 1))


def gpu_count() -> int:
    """``${posexp_gpu_count:}``: visible CUDA devices (0 without CUDA)."""
    from posexp.hardware import gpu_count as count

    return count()


def parent_tag(parent: Any) -> str:
    """``<data>_<pe>_h<heads>`` of a fine-tune's parent run, for the new run dir's name."""
    from posexp.checkpoint import read_meta
    from posexp.errors import PosexpError

    try:
        meta = read_meta(parent)
        model, data = meta["model"], (meta.get("config") or {}).get("data") or {}
        prefix = f"{data['source']}_" if data.get("source") else ""
        return f"{prefix}{model['pe']}_h{model['n_heads']}"
    except (PosexpError, KeyError, TypeError):
        return "run"


RESOLVERS = {
    "posexp_run_dir": run_dir,
    "posexp_job_dir": job_dir,
    "posexp_n_jobs": n_jobs,
    "posexp_gpu_count": gpu_count,
    "posexp_parent_tag": parent_tag,
}


def register_resolvers() -> None:
    """Register every resolver once (later calls do nothing)."""
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
