"""The training task: Hydra composes a config, this turns it into a trained run dir.

A run dir holds ``.hydra/`` (the composed config), ``train.log``, TensorBoard event files and
``checkpoint/``. The loop (``posexp.runtime.trainer``) is plain PyTorch: AdamW, linear warmup
then cosine decay, gradient clipping, periodic evaluation on a fixed validation slice, bf16
autocast where it is faster (``train.precision``; evaluation during training runs in the same
precision). Before the first step the run's memory and time are estimated
(``posexp.runtime.budget``); stop signals are handled by ``posexp.runtime.stops``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, read_write
from torch.utils.tensorboard import SummaryWriter

from posexp.config import RunConfig, from_composed
from posexp.data import dataset_kind
from posexp.errors import Abort, PosexpError, first_line
from posexp.kernels.choice import KernelChoice
from posexp.model import GPT
from posexp.objectives import OBJECTIVES, build_objective
from posexp.runtime import distributed
from posexp.runtime.budget import check_budget
from posexp.runtime.build import build_data, model_config
from posexp.runtime.device import check_resume_threads, place, set_cublas_workspace
from posexp.runtime.hardware import out_of_memory
from posexp.runtime.kernel_choice import resolve_run_kernels
from posexp.runtime.optim import (
    Schedule,
    parameter_groups,
    resume_schedule,
    saved_schedule,
)
from posexp.runtime.precision import autocast as precision_autocast
from posexp.runtime.stops import GracefulStop, StopRequested
from posexp.runtime.sweeps import completed_results, continue_unfinished
from posexp.runtime.tensorboard import hparam_dict, trial_name, write_config_text, write_hparams
from posexp.runtime.trainer import Trainer
from posexp.runtime.weights import check_same_network, check_start_weights
from posexp.scoring.metrics import clock_text, metric_text
from posexp.scoring.records import checkpoint_of
from posexp.store import provenance
from posexp.store.checkpoint import load_state, load_weights
from posexp.store.files import disk_full, keep_damaged, write_bytes_atomic, write_text_atomic
from posexp.store.lifecycle import (
    abandon_run,
    discard_interrupted,
    fail_run,
    job_failed,
    keep_log_name,
    own_run_dir,
    report_stop,
)
from posexp.store.resume import effective_config, finished_results
from posexp.store.rundir import RunDir

log = logging.getLogger("posexp")

# How torch words the error of an op without a deterministic kernel under train.deterministic.
NOT_DETERMINISTIC = "does not have a deterministic implementation"


def run_training(cfg: RunConfig, run_dir: Path, discard: bool = False) -> dict[str, Any]:
    """Train (or resume) the run described by ``cfg`` into ``run_dir``; returns final metrics.

    ``discard``: this process made ``run_dir`` for a new run, so a stop that cannot wait for a
    checkpoint removes it (nothing to resume) instead of leaving an unusable dir."""
    try:
        # From here on a stop signal only sets a flag, which the loop reads after its next step:
        # a signal while the data loads or the model is built (after provenance says "running")
        # must not end the process before that session is recorded as interrupted. A second
        # signal, or a step outlasting train.stop_grace_s, ends it at once (abandon_run).
        def abandon(signum: int, why: str) -> None:
            abandon_run(run_dir, discard, why)

        with GracefulStop(cfg.train.stop_grace_s, abandon) as stop:
            return _run_training(cfg, run_dir, stop)
    except (MemoryError, RuntimeError) as e:
        if cfg.train.deterministic and NOT_DETERMINISTIC in str(e):
            # torch names the op (e.g. "scatter_add_cuda_kernel does not have a deterministic
            # implementation, but ..."): one line, not a traceback from inside the step.
            op = (str(e).split(NOT_DETERMINISTIC)[0].strip().splitlines() or ["an op"])[-1]
            raise PosexpError(
                f"train.deterministic=true: {op} has no deterministic kernel; "
                f"set train.deterministic=false for this run"
            ) from None
        short = out_of_memory(e)
        if short is None:
            raise
        e.__traceback__ = None  # its frames hold the half-built model: free it before going on
    t, m = cfg.train, cfg.model
    raise PosexpError(
        f"{short}: lower train.batch_size={t.batch_size}, train.seq_len={t.seq_len} "
        f"or the model (model.d_model={m.d_model}, model.n_layers={m.n_layers})"
    )


def check_config(cfg: RunConfig) -> None:
    """The checks a run makes before it loads any data (each job of a sweep, too, before the
    sweep starts): ModelConfig checks the network's shape (heads divide d_model, ...),
    KernelChoice that the bias backend runs here, the objective registry that some objective
    trains the dataset's kind, and the start weights."""
    model_config(cfg, vocab_size=1)
    KernelChoice(bias=cfg.attention.backend)
    OBJECTIVES.get(dataset_kind(cfg.data.name))
    check_start_weights(cfg)


def kept_tokenizer(cfg: RunConfig, run_dir: Path) -> Path | None:
    """The learned tokenizer a run must train with where one was kept: its own on a resume, its
    parent's when it starts from a parent's weights (the embeddings index that vocabulary)."""
    own = RunDir(run_dir).tokenizer_file
    if cfg.resume and own.is_file():
        return own
    return RunDir(Path(cfg.parent)).tokenizer_file if cfg.parent else None


def keep_tokenizer(source: Path, kept: Path) -> None:
    """The run's learned tokenizer copied into its dir once, so decoding and evaluation use it
    as trained, whatever becomes of the data files or the cache."""
    if not kept.is_file():
        kept.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(kept, source.read_bytes())


def _run_training(cfg: RunConfig, run_dir: Path, stop: GracefulStop) -> dict[str, Any]:
    started = time.perf_counter()
    distributed.check_batch_size(cfg.train.batch_size)
    device = place(cfg)
    torch.manual_seed(cfg.seed)
    check_config(cfg)
    with distributed.rank_zero_first():  # rank 0 fills the tokenizer/token caches first
        data = build_data(cfg, kept_tokenizer(cfg, run_dir))
    if distributed.is_main() and data.tokenizer.file is not None:
        keep_tokenizer(data.tokenizer.file, RunDir(run_dir).tokenizer_file)
    mcfg = model_config(cfg, data.tokenizer.vocab_size)
    saved_meta = RunDir(run_dir).meta() if cfg.resume else {}
    check_resume_threads(saved_meta.get("threads"), device)
    # Measurements draw from generators of their own: the model's init below is the seed's.
    with distributed.rank_zero_first():  # rank 0 measures (CPU auto), the others read its cache
        chosen = resolve_run_kernels(cfg, mcfg, device, saved_meta)
    precision = chosen.precision
    model = GPT(mcfg, chosen.kernels)
    autocast = precision_autocast(precision, device)
    objective = build_objective(cfg, data, device, autocast)
    check_budget(cfg, mcfg, model, device, precision, getattr(objective, "row_tokens", None))
    state, parent = None, {}
    if cfg.resume:
        load_weights(run_dir, model)
        state = load_state(run_dir, [p for group in parameter_groups(model) for p in group])
    elif cfg.parent:
        # `posexp finetune`, or `posexp train parent=<run>` (e.g. on other data): start from the
        # parent run's weights; the network must be the same.
        check_same_network(RunDir.open(cfg.parent, "parent").meta()["model"], mcfg)
        # Which weights of the parent: a parent trained on (or trained longer) moves on later.
        taken = checkpoint_of(RunDir(Path(cfg.parent)))
        load_weights(Path(cfg.parent), model)
        parent = {"parent": {"dir": str(cfg.parent), "step": taken.step, "sha256": taken.sha256}}
        log.info("initialised from parent run %s at step %d", cfg.parent, taken.step)
    writer = (
        SummaryWriter(str(run_dir), purge_step=state["step"] + 1 if state else None)
        if distributed.is_main()
        else distributed.NullWriter()
    )
    schedule = Schedule(cfg.train.warmup_steps, cfg.train.max_steps)
    if state:
        saved = saved_schedule(RunDir(run_dir).meta())
        schedule, note = resume_schedule(saved, cfg.train, state["step"])
        if note and distributed.is_main():
            log.warning(note)
    if distributed.is_main():
        record = {**dataclasses.asdict(schedule), "on_resume": cfg.train.resume_schedule}
        provenance.start(
            run_dir,
            **chosen.facts(),
            schedule=record,
            deterministic=cfg.train.deterministic,
            **parent,
        )
        write_config_text(writer, cfg.to_dict(), precision)
    trainer = Trainer(
        cfg, run_dir, model, mcfg, device, objective, writer, autocast, precision, schedule=schedule
    )
    if state:
        trainer.restore(state)
        if distributed.is_main():
            # The results of the session before (a sweep job completed at fewer steps) are no
            # longer this run's: while it trains, and if it is stopped or killed, it is unfinished.
            RunDir(run_dir).clear_results()
        log.info("resumed %s at step %d", run_dir, trainer.step)
    distributed.reseed(cfg.seed, trainer.step)
    n_params = model.num_params()
    log.info(
        "model: %s pe=%s heads=%d d_model=%d layers=%d params=%s device=%s attention: %s",
        cfg.model.name,
        mcfg.pe,
        mcfg.n_heads,
        mcfg.d_model,
        mcfg.n_layers,
        f"{n_params:,}",
        device,
        chosen.describe_bias(device, model.pe.flex_kind),
    )
    chosen.log(log)
    if cfg.train.pose.enabled:  # task rows: the window is the longest training row
        window = getattr(objective, "row_tokens", cfg.train.seq_len)
        log.info("%s", cfg.train.pose.describe(window))
    try:
        trainer.fit(stop)
    except (StopRequested, KeyboardInterrupt) as e:
        if distributed.is_main():
            report_stop(run_dir, e, trainer.step)
        raise
    if not distributed.is_main():
        return {}
    metrics = {**objective.finish(trainer.raw_model, writer), "final/params": n_params}
    params = {
        **hparam_dict(cfg),
        "params": n_params,
        "precision": precision,
        "training_attention": chosen.attention,  # the kernel attention.causal chose, or "own"
        "training_linear": chosen.kernels.linear,  # the kernel train.linear chose
    }
    write_hparams(writer, params, trial=trial_name(params, run_dir))
    writer.close()
    RunDir(run_dir).write_results({"status": "completed", "step": trainer.step, **metrics})
    provenance.finish(run_dir, "completed")
    # Named as the log lines name them: final/val_loss -> val/loss.
    names = {k: k.removeprefix("final/").replace("_", "/", 1) for k in metrics}
    shown = "  ".join(
        f"{names[k]} {metric_text(k, v)}" for k, v in metrics.items() if k != "final/params"
    )
    log.info("done in %s: %s", clock_text(time.perf_counter() - started), shown)
    log.info("run dir %s  (tensorboard --logdir %s)", run_dir, run_dir.parent)
    return metrics


def train_task(cfg: DictConfig) -> dict[str, Any] | None:
    """Hydra task function (module level so joblib/submitit can pickle it by reference)."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    if multirun and distributed.env().enabled:
        raise Abort(
            "torchrun runs one training run; drop -m (sweep with hydra/launcher=... instead)"
        )
    if OmegaConf.select(cfg, "train.deterministic") is True:
        set_cublas_workspace()  # before torchrun's process group first touches CUDA
    if not cfg.get("resume") and OmegaConf.select(cfg, "data.source") == "text":
        # Saved as absolute paths: an evaluation from another folder reads the same files.
        from posexp.data.text import FILE_KEYS, absolute_files

        fixed = absolute_files(OmegaConf.to_container(cfg.data, resolve=True), hc.runtime.cwd)
        with read_write(cfg):
            for key in FILE_KEYS:
                if key in cfg.data and fixed.get(key) is not None:
                    cfg.data[key] = fixed[key]
    # One writer per run dir: this process's claim or lock, held until the task returns.
    with distributed.session(cfg.device), own_run_dir(run_dir, cfg, multirun) as run_dir:
        if cfg.resume:
            keep_log_name(run_dir)
        try:
            return _train_task(cfg, run_dir, multirun)
        except StopRequested as e:
            e.forward()  # to submitit's handler (it requeues the job) or exit 128 + signal
            raise
        finally:
            if multirun and torch.cuda.is_available():
                torch.cuda.empty_cache()  # a joblib worker may run its next job on another GPU


def record_resumed_config(run_dir: Path, cfg: DictConfig) -> None:
    """Hydra's record of a resumed run, rewritten with what this session trains; one that no
    longer parses (edited by hand) is kept as ``config.yaml.bak`` and said, not lost unseen."""
    import yaml

    record = run_dir / ".hydra" / "config.yaml"
    try:
        yaml.safe_load(record.read_text()) if record.exists() else None
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        backup = keep_damaged(record)
        log.warning(
            "%s did not parse (%s): kept as %s, written again from the checkpoint's config",
            record,
            first_line(e),
            backup.name if backup else "nothing",
        )
    write_text_atomic(record, OmegaConf.to_yaml(cfg))


def _train_task(cfg: DictConfig, run_dir: Path, multirun: bool) -> dict[str, Any]:
    fresh = not cfg.resume
    try:
        if multirun and not cfg.resume:
            # A rerun sweep: a completed job returns its results, an unfinished one resumes.
            run = from_composed(cfg)
            done = completed_results(run, run_dir)
            if done is not None:
                return done
            if continue_unfinished(run, run_dir):
                cfg = cfg.copy()
                cfg.resume = str(run_dir)
        if cfg.resume:
            cfg = effective_config(cfg)
            done = finished_results(run_dir, int(cfg.train.max_steps))
            if done is not None:  # nothing to train: do not evaluate and log the end again
                log.info(
                    "%s already completed %d steps; raise train.max_steps to train longer",
                    run_dir,
                    done["step"],
                )
                return done
            if distributed.is_main():
                record_resumed_config(run_dir, cfg)
        return run_training(from_composed(cfg), run_dir, discard=fresh and not multirun)
    except PosexpError as e:
        fail_run(run_dir, e, multirun, discard=fresh)
    except KeyboardInterrupt:
        if fresh and not multirun:
            discard_interrupted(run_dir)
        raise
    except Exception as e:
        if disk_full(e):  # a log, event or provenance write on a full disk: one line, not a bug
            where = getattr(e, "filename", None) or run_dir
            full = PosexpError(f"no space left on device writing {str(where)!r}; free some space")
            fail_run(run_dir, full, multirun, discard=fresh)
        if multirun:  # an unexpected error fails this job only; Hydra runs the others
            job_failed(run_dir, e)
        raise
