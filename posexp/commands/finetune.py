"""`posexp finetune --run DIR <overrides>`: continue a run at a longer length, as a new run.

Hydra composes ``configs/finetune.yaml`` (train.yaml plus fine-tune defaults) with the user's
overrides; the task then builds the effective config from the PARENT's saved config:

* kept from the parent (overriding them is an error): model, pe, heads, data, tokenizer, except
  a synthetic task's sizes (``data.train_lengths``, ``data.test_lengths``), which a longer
  context is for;
* from this composition (finetune.yaml + command line): everything else, e.g. extension
  (method, factor, params), device, seed, cache_dir; sections only the parent's config has
  (e.g. a preset's ``extrapolate:``) are kept;
* train: the parent's settings, with finetune.yaml's defaults (max_steps, lr, ...) and then the
  user's ``train.*`` overrides on top; ``train.seq_len`` defaults to L0 x extension.factor;
* PoSE (``train.pose.enabled=true``, ``posexp/positions/pose.py``): ``train.seq_len``, the window, defaults
  to L0 and ``train.pose.target_length`` to L0 x extension.factor; a target given without
  ``extension.factor`` sets the factor to target / L0 (the method is set up for the target);
  for a synthetic-task parent L0 here is its longest training row, the window its whole rows
  must fit in (``task_window``);
* ``parent`` = the parent run dir, ``train_length`` = the parent's training length L0, which is
  also the extension's ``original_length`` unless given.

The model starts from the parent's weights (``run_training``'s ``parent`` hook) with the
extension in its config, so the checkpoint's ``meta.json`` records the baked-in method and
``posexp eval-extrapolate`` evaluates it by default (as ``baked:<method>``).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf

from posexp import checks
from posexp.commands.train import run_training
from posexp.config import NETWORK_ROOTS, from_composed
from posexp.config.paths import config_dir
from posexp.config.run import check_trainable
from posexp.config.sections import named_entry
from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.runtime.stops import StopRequested
from posexp.store.files import write_text_atomic
from posexp.store.lifecycle import discard_interrupted, fail_run, job_failed, own_run_dir
from posexp.store.rundir import RunDir

log = logging.getLogger("posexp")

# A fine-tune keeps its parent's network and data (NETWORK_ROOTS), except the sizes a synthetic
# task trains and tests at, which a longer context changes, and where its tests put a passkey
# (training draws every depth).
DATA_SIZES = ("data.train_lengths", "data.test_lengths", "data.depths")


def finetune_args(run: Path | None, args: list[str]) -> list[str]:
    """Hydra arguments for the finetune command: ``parent=<run>`` then the user's overrides."""
    if run is None:
        if any(a in ("--help", "-h", "--hydra-help", "-sc", "--shell-completion") for a in args):
            return ["parent=DIR", *args]  # Hydra's help: groups and the composed config
        raise PosexpError("finetune needs --run DIR, the run to continue (e.g. outputs/runs/<run>)")
    parent = RunDir.open_run(run, "--run")
    parent.meta()  # one-line error now if it has no checkpoint
    run = parent.path
    if any(a.split("=", 1)[0].lstrip("+~") in ("parent", "resume") for a in args):
        raise PosexpError(
            "finetune sets parent= from --run and starts a new run; to continue an interrupted "
            "fine-tune use `posexp train resume=<its run dir>`"
        )
    # Quoted: sweep job dirs are named like `pe=rope,heads=4`, which Hydra would parse.
    quoted = str(run).replace("\\", "\\\\").replace("'", "\\'")
    # Compose with the parent's data source, so its keys (a task's sizes) can be overridden.
    data = parent.config().data
    # A task's own group (data=passkey) holds its keys (depths, key_digits); `synthetic` does not.
    task = data.params.get("task")
    source = task if task and (Path(config_dir()) / "data" / f"{task}.yaml").exists() else data.name
    given = any(a.split("=", 1)[0].lstrip("+~") == "data" for a in args)
    same_data = (
        [f"data={source}"]
        if not given and (Path(config_dir()) / "data" / f"{source}.yaml").exists()
        else []
    )
    ours = [f"parent='{quoted}'", *same_data, *beside_sweep(run, args)]
    # Beside the user's first override: Hydra's argparse takes the overrides as one run of
    # positional words, so flags (`-m`, `--cfg job`) may come before or after, never between.
    first = next((i for i, a in enumerate(args) if "=" in a and not a.startswith("-")), len(args))
    return [*args[:first], *ours, *args[first:]]


FINETUNES = "finetunes"  # a sweep's sub-folder for the fine-tunes of its jobs


def sweep_of(run: Path) -> Path | None:
    """The sweep dir a run is a job of (the nearest folder above it holding Hydra's
    ``multirun.yaml``), or None for a run of its own."""
    from posexp.store.rundir import SWEEP_MARK

    for folder in run.resolve().parents:
        if (folder / SWEEP_MARK).is_file():
            return folder
    return None


def beside_sweep(run: Path, args: list[str]) -> list[str]:
    """Where a fine-tune of a sweep's job is written by default: under that sweep
    (``<sweep>/finetunes/<job>_ft_<time>``), so `posexp report <sweep>` shows it beside the
    job it started from; [] for a run of its own, a sweep of fine-tunes (``-m``) or a run dir
    the user chose."""
    sweep = sweep_of(run)
    chosen = any(a.split("=", 1)[0].lstrip("+~").startswith("hydra.run.dir") for a in args)
    if sweep is None or chosen or any(a in ("-m", "--multirun") for a in args):
        return []
    job = str(run.resolve().relative_to(sweep)).replace("/", "_").replace("\\", "_")
    job = job.replace("'", "").replace("=", "-").replace(",", "_")
    folder = str(sweep / FINETUNES).replace("\\", "\\\\").replace("'", "\\'")
    return [f"hydra.run.dir='{folder}/{job}_ft_${{now:%Y-%m-%d_%H-%M-%S}}'"]


def _plain(value: Any) -> Any:
    """Plain Python data; config nodes resolve their interpolations against their own root."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def finetune_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The effective config of a fine-tune: the parent's, with the fine-tune's changes."""
    parent = Path(str(cfg.parent))
    parent_run = RunDir.open(parent, "parent")
    meta = parent_run.meta()
    trainer = parent_run.holder()
    if trainer is not None:  # its weights now, not the ones it will end with
        log.warning(
            "the parent is still training (%s): fine-tuning from its checkpoint of step %s",
            trainer,
            meta.get("step"),
        )
    elif parent_run.status() not in ("completed", "failed"):
        log.warning(
            "the parent stopped before its last step: fine-tuning from its checkpoint of step "
            "%s of %s",
            meta.get("step"),
            meta["config"]["train"]["max_steps"],
        )
    saved = OmegaConf.create(meta["config"])
    keys = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    # DroPE: another encoding on the same weights (checked against the parent's shapes when the
    # run starts, posexp/runtime/weights.py), recalibrated at the parent's length.
    pe_changed = _plain(OmegaConf.select(cfg, "pe")) != _plain(OmegaConf.select(saved, "pe"))
    for key in keys:
        root = key.split(".")[0].split("@")[0]
        if key in DATA_SIZES or (
            key == "data"
            and all(
                OmegaConf.select(cfg, f"data.{k}") == OmegaConf.select(saved, f"data.{k}")
                for k in ("source", "task")  # passkey and reverse share source: synthetic
            )
        ):
            continue  # the parent's own data source (finetune_args composes with it)
        if root == "pe" and pe_changed:
            continue
        if root in NETWORK_ROOTS:
            want, have = OmegaConf.select(cfg, root), OmegaConf.select(saved, root)
            if _plain(want) != _plain(have):
                raise PosexpError(
                    f"finetune keeps the parent's {root} ({_short(root, have)}); drop {key}= "
                    f"(train a new run to change it)"
                )
    # Start from this composition (so keys added to train.yaml since the parent ran exist), take
    # the network and data from the parent, and keep the parent's extra sections (extrapolate).
    merged = OmegaConf.create(_plain(cfg))
    for key, value in saved.items():
        if (key in NETWORK_ROOTS and not (key == "pe" and pe_changed)) or key not in merged:
            merged[key] = value
    for key in DATA_SIZES:
        if key in keys:
            OmegaConf.update(merged, key, _plain(OmegaConf.select(cfg, key)), force_add=True)
    # train: the parent's settings, except finetune.yaml's defaults and the user's overrides.
    train = _plain(cfg.train)
    own = set(OmegaConf.load(_finetune_yaml()).train)
    own |= {k.split(".")[1] for k in keys if k.startswith("train.")}
    for key, value in _plain(saved.train).items():
        if key not in own:
            train[key] = value
    merged.train = train
    l0 = int(meta["model"]["train_length"])
    merged.train_length = l0
    # The extension's original_length is the parent's training length unless given.
    extension = ExtensionConfig.from_dict(_plain(merged.extension)).with_original_length(l0)
    check_trainable(meta["model"]["pe"], extension.method)
    merged.parent = str(parent)
    merged.resume = None
    if checks.boolean("train.pose.enabled", merged.train.pose.enabled):
        window = task_window(saved.data, merged.data)
        extension = pose_lengths(merged, extension, l0, "extension.factor" in keys, window)
    elif pe_changed:
        recalibration(merged, saved, l0, "train.max_steps" in keys)
    else:
        if merged.train.seq_len is None:
            merged.train.seq_len = int(round(l0 * extension.factor))
        if merged.train.seq_len <= l0:
            raise PosexpError(
                f"finetune needs train.seq_len longer than the parent's training length {l0}, "
                f"got {merged.train.seq_len}; set train.seq_len or extension.factor > 1 "
                f"(e.g. extension=yarn extension.factor=4)"
            )
    merged.extension = extension.to_dict()
    return merged


# DroPE (Gelberg et al. 2025) from scratch: RoPE dropped after 14B of 16B tokens, then 2B tokens
# of recalibration at the original length; here the same share of the parent's steps.
RECALIBRATION_SHARE = 2 / 14


def recalibration(merged: DictConfig, saved: DictConfig, l0: int, steps_given: bool) -> None:
    """A fine-tune that changes the encoding (DroPE) recalibrates at the parent's length L0
    (train.seq_len defaults to L0, never shorter) for 2/14 of the parent's steps unless
    train.max_steps is given."""
    if merged.train.seq_len is None:
        merged.train.seq_len = l0
    if merged.train.seq_len < l0:
        raise PosexpError(
            f"finetune with another pe recalibrates at the parent's training length {l0} or "
            f"longer, got train.seq_len={merged.train.seq_len}; drop train.seq_len"
        )
    if not steps_given:
        merged.train.max_steps = max(1, round(int(saved.train.max_steps) * RECALIBRATION_SHARE))


def task_window(parent_data: Any, data: Any) -> int | None:
    """PoSE's window for a synthetic-task parent: its longest training row (None for text).
    Refuses a fine-tune whose rows (data.train_lengths) are longer than the window."""
    from posexp.data import check_dataset, dataset_kind

    source, params = named_entry("data", _plain(parent_data), "source")
    if dataset_kind(source) != "synthetic":
        return None
    window = check_dataset(source, params)
    _, own = named_entry("data", _plain(data), "source")
    longest = check_dataset(source, own)
    if window is not None and longest is not None and longest > window:
        raise PosexpError(
            f"finetune with PoSE trains task rows within the window, the parent's longest "
            f"training row ({window} tokens); data.train_lengths={list(own['train_lengths'])} "
            f"makes rows of {longest} tokens; keep data.train_lengths within the parent's "
            f"{list(params['train_lengths'])}, or drop train.pose.enabled for a full-length "
            f"fine-tune"
        )
    return window


def pose_lengths(
    merged: DictConfig,
    extension: ExtensionConfig,
    l0: int,
    factor_given: bool,
    window: int | None = None,
) -> ExtensionConfig:
    """PoSE's lengths for a fine-tune: the window (train.seq_len) defaults to L0, the target
    to L0 x extension.factor; a target given without the factor sets s = target / L0. For a
    task parent L0 here is ``window``, its longest training row (train.seq_len only bounds the
    rows). Returns the extension, set up for the target."""
    pose = merged.train.pose
    target = checks.positive_int("train.pose.target_length", pose.target_length, allow_none=True)
    scales = extension.registered.uses_factor and extension.registered.acts_on != "nothing"
    base = window or l0
    if target is None:
        target = int(round(base * extension.factor))
    if target <= base:
        parent = (
            f"training length {l0}" if window is None else f"longest training row ({window} tokens)"
        )
        raise PosexpError(
            f"finetune with PoSE needs train.pose.target_length longer than the parent's "
            f"{parent}, got {target}; set train.pose.target_length or "
            f"extension.factor > 1 (e.g. extension=yarn extension.factor=4)"
        )
    if scales and not factor_given:
        extension = dataclasses.replace(extension, factor=target / base)
    elif scales and abs(extension.factor * base - target) >= 1:
        log.warning(
            "PoSE trains positions up to train.pose.target_length=%d, but extension %s is set "
            "up for %d (extension.factor=%g x %d)",
            target,
            extension.method,
            round(extension.factor * base),
            extension.factor,
            base,
        )
    pose.target_length = target
    if merged.train.seq_len is None:
        merged.train.seq_len = l0
    return extension


def _finetune_yaml() -> Path:
    return Path(config_dir()) / "finetune.yaml"


def _short(root: str, value: Any) -> str:
    """A section as its override reads (``data=kjv``, ``pe=rope``), else ``root=value``."""
    plain = _plain(value)
    if isinstance(plain, dict):
        name = plain.get("name", plain.get("task", plain.get("source")))  # data=reverse
        if name is not None:
            return f"{root}={name}"
    return f"{root}={plain}"


def finetune_task(cfg: DictConfig) -> dict[str, Any] | None:
    """Hydra task function (module level so joblib/submitit can pickle it by reference)."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    with own_run_dir(run_dir, cfg, multirun) as run_dir:  # one writer per run dir
        try:
            merged = finetune_config(cfg, list(hc.overrides.task))
            write_text_atomic(run_dir / ".hydra" / "config.yaml", OmegaConf.to_yaml(merged))
            pose = merged.train.pose
            log.info(
                "fine-tuning %s at seq_len %d with extension %s (factor %s)%s",
                merged.parent,
                merged.train.seq_len,
                merged.extension.method,
                merged.extension.get("factor"),
                f" and PoSE (target {pose.target_length}, {pose.chunks} chunks)"
                if pose.enabled
                else "",
            )
            return run_training(from_composed(merged), run_dir, discard=not multirun)
        except StopRequested as e:
            e.forward()  # to submitit's handler (it requeues the job) or exit 128 + signal
            raise
        except PosexpError as e:
            fail_run(run_dir, e, multirun, discard=True)
        except KeyboardInterrupt:
            if not multirun:
                discard_interrupted(run_dir)
            raise
        except Exception as e:
            if multirun:  # an unexpected error fails this job only; Hydra runs the others
                job_failed(run_dir, e)
            raise
