"""The OmegaConf resolvers posexp's YAML files use, registered in one place.

``posexp.config.paths.config_dir()`` registers them, so every way of composing posexp's configs (the
CLI, a test, a notebook with ``hydra.compose``) has them, whatever was imported before.
"""

from __future__ import annotations

import hashlib
from typing import Any

from omegaconf import OmegaConf


def run_dir(resume: Any, fresh: str) -> str:
    """``hydra.run.dir``: the run being resumed, else a new timestamped dir."""
    return str(resume) if resume not in (None, "", "None") else fresh


# Set by the CLI for a sweep (``train -m``): which command-line overrides sweep and which fix one
# value, as JSON. A job dir is then named after the swept keys alone.
SWEEP_ENV = "POSEXP_SWEEP_KEYS"


def job_dir(override_dirname: str, limit: int = 120, *, _root_: Any = None) -> str:
    """``hydra.sweep.subdir``: the job's swept overrides (``heads=4,pe=rope``), else all of them,
    shortened with a stable hash past ``limit`` characters.

    Keys fixed for the whole sweep (``model=tiny``) would make every name long and alike; they
    stay in the job's ``.hydra/overrides.yaml``. File names stop at 255 bytes, and the hash keeps
    a long name stable, so rerunning the sweep finds (and skips) finished jobs.
    """
    name = _swept_only(_root_) or override_dirname
    if len(name) <= limit:
        return name or "default"
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: limit - 11]}_{digest}"


def _swept_only(root: Any) -> str:
    """``k=v,k=v`` of the job's overrides whose keys the sweep varies ('' if unknown or none)."""
    given = sweep_given()
    if given is None:
        return ""
    try:
        task = list(OmegaConf.select(root, "hydra.overrides.task", default=[]) or [])
        preset = OmegaConf.select(root, "hydra.sweeper.params", default=None)
        swept = swept_override_keys(given, preset)
        excluded = set(
            OmegaConf.select(root, "hydra.job.config.override_dirname.exclude_keys", default=[])
            or []
        )
    except (KeyError, ValueError, TypeError):
        return ""
    chosen = [o for o in task if o.split("=", 1)[0].lstrip("+~") in swept - excluded and "=" in o]
    return ",".join(sorted(chosen))


def sweep_given() -> dict[str, Any] | None:
    """What the CLI said of a sweep's command line (SWEEP_ENV); None outside a CLI sweep."""
    import json
    import os

    try:
        given = json.loads(os.environ[SWEEP_ENV])
    except (KeyError, ValueError):
        return None
    return given if isinstance(given, dict) else None


def swept_override_keys(given: dict[str, Any], preset: Any) -> set[str]:
    """The override keys a sweep varies: swept on the command line, or by the preset's
    sweeper params unless the command line fixes them."""
    preset_swept = {str(k) for k, v in dict(preset or {}).items() if sweeps(str(k), str(v))}
    return set(given.get("swept", [])) | (preset_swept - set(given.get("fixed", [])))


def sweeps(key: str, value: str) -> bool:
    """Whether ``key=value`` is a Hydra sweep (``1,2``, ``range(3)``, ``choice(a,b)``, ...)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        (override,) = OverridesParser.create().parse_overrides([f"{key}={value}"])
    except Exception:  # noqa: BLE001  not parseable: Hydra itself will say why
        return False
    return override.is_sweep_override()


def n_jobs(*, _root_: Any) -> int:
    """``${posexp_n_jobs:}``: joblib's default n_jobs for the config's placement.jobs_per_gpu."""
    from posexp.runtime.hardware import default_n_jobs

    return default_n_jobs(int(OmegaConf.select(_root_, "placement.jobs_per_gpu", default=1) or 1))


def gpu_count() -> int:
    """``${posexp_gpu_count:}``: visible CUDA devices (0 without CUDA)."""
    from posexp.runtime.hardware import gpu_count as count

    return count()


def parent_tag(parent: Any) -> str:
    """``<data>_<pe>_h<heads>`` of a fine-tune's parent run, for the new run dir's name."""
    from posexp.errors import PosexpError
    from posexp.store.checkpoint import read_meta

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
