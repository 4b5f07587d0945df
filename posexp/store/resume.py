"""Resuming a run: its saved config, with only train/device/seed overrides applied on top."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from posexp.config import RESUME_ROOTS, RunConfig
from posexp.errors import PosexpError
from posexp.store.rundir import RunDir


def effective_config(cfg: DictConfig) -> DictConfig:
    """For a resume: the run's saved config, with only train/device overrides applied on top."""
    run = RunDir.open(cfg.resume, "resume=")
    meta = run.meta()
    saved = OmegaConf.create(meta["config"])
    overrides = HydraConfig.get().overrides.task
    keys = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    resolved = OmegaConf.to_container(cfg, resolve=True)  # model.n_heads: ${heads}
    # Both sides in the typed config's normal form: a saved config carries every key at its
    # effective value (pe.randomized=false for a PE whose YAML never names it), so comparing the
    # raw composition with it would refuse the very command that made the run (a rerun sweep).
    want_all = RunConfig.from_dict({**resolved, "resume": None}).to_dict()
    have_all = RunConfig.from_saved(OmegaConf.to_container(saved, resolve=True)).to_dict()
    for key in keys:
        root = key.split(".")[0].split("@")[0]
        if root in RESUME_ROOTS:
            want, have = want_all.get(root), have_all.get(root)
            if want != have:
                raise PosexpError(
                    f"resume={cfg.resume!r} was trained with {root}={short_value(have)}, "
                    f"not {root}={short_value(want)}; drop that override or start a new run"
                )
    merged = saved.copy()
    for key in keys:
        if key.split(".")[0] in ("train", "device", "seed"):
            OmegaConf.update(merged, key, OmegaConf.select(cfg, key), force_add=True)
    merged.resume = cfg.resume
    step = int(meta["step"])
    if int(merged.train.max_steps) < step:
        raise PosexpError(
            f"train.max_steps={merged.train.max_steps} is below the step {step} of "
            f"{str(run.path)!r}'s checkpoint; allowed: train.max_steps >= {step}"
        )
    return merged


def short_value(value: Any) -> str:
    """`rope` for a config group entry named rope, `rope(base=500000.0)` when it has other keys."""
    if isinstance(value, DictConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, dict) and "name" in value:
        # Settings at their off value (pe.randomized=false, a null max_position) say nothing.
        extra = ", ".join(
            f"{k}={v}" for k, v in value.items() if k != "name" and v is not None and v is not False
        )
        return f"{value['name']}({extra})" if extra else str(value["name"])
    return str(value)


def finished_results(run_dir: Path, max_steps: int) -> dict[str, Any] | None:
    """The run's results if it already completed exactly ``max_steps`` steps, else None."""
    results = RunDir(run_dir).results()
    done = (
        results is not None
        and results.get("status") == "completed"
        and results.get("step") == max_steps
    )
    return results if done else None
