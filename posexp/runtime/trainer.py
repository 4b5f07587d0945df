"""The training loop: AdamW steps with logging, evaluation, checkpoints and stop signals.

``Trainer`` holds everything one run's loop touches; ``posexp.commands.train`` builds it (data,
model, precision, resume state) and calls ``fit``. Linear warmup then cosine decay
(``posexp.runtime.optim.Schedule``), gradient clipping, periodic evaluation on a fixed
validation slice, a checkpoint at each interval and at the step a stop signal arrives in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from posexp.config import RunConfig
from posexp.model import GPT, ModelConfig, doc_mask
from posexp.objectives import Objective
from posexp.positions.pose import filled_lengths, pose_positions
from posexp.positions.randomized import random_positions
from posexp.runtime import distributed
from posexp.runtime.device import to_device
from posexp.runtime.optim import Schedule, build_optimizer
from posexp.runtime.stops import GracefulStop
from posexp.scoring.metrics import clock_text, metric_text
from posexp.store.checkpoint import rng_state, save_checkpoint, set_rng_state
from posexp.store.lifecycle import Diverged
from posexp.store.rundir import RunDir

log = logging.getLogger("posexp")

# A loss this many times ln(vocab) (a uniform guess's) means training diverged: the untrained
# model starts near 1x and training only lowers it; lr=1000 took the tiny model's to ~100x.
DIVERGED = 10.0


@dataclass
class Trainer:
    """Holds everything the loop touches; ``fit`` runs it from ``step`` to ``max_steps``."""

    cfg: RunConfig
    run_dir: Path
    model: GPT
    mcfg: ModelConfig
    device: torch.device
    objective: Objective
    writer: SummaryWriter
    autocast: Any
    precision: str = "fp32"
    step: int = 0
    best_val: float = float("inf")
    last_val: float = float("nan")
    stop: GracefulStop | None = None  # set by fit: stop signals end the loop after a step
    schedule: Schedule | None = None  # None: warmup then decay over train.max_steps

    def __post_init__(self) -> None:
        t = self.cfg.train
        self.raw_model = self.model
        self.model.to(self.device)
        self.optimizer = build_optimizer(self.model, t, self.device)
        self.schedule = self.schedule or Schedule(t.warmup_steps, t.max_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, self.schedule.factor(t.min_lr / t.lr)
        )
        self.model = distributed.wrap(self.model, self.device)  # DDP under torchrun
        if t.compile:
            self.model = torch.compile(self.model)

    def state(self) -> dict[str, Any]:
        """Optimizer, scheduler, RNG and data position (the step) for an exact resume."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(),
            "step": self.step,
            "best_val": self.best_val,
            "last_val": self.last_val,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Inverse of ``state``."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        self.step, self.best_val, self.last_val = (
            state["step"],
            state["best_val"],
            state["last_val"],
        )

    def save(self) -> None:
        """Atomic checkpoint of weights and state."""
        meta = {
            "step": self.step,
            "model": self.mcfg.to_dict(),
            "config": self.cfg.to_dict(),
            "val_loss": self.last_val,
            "params": self.raw_model.num_params(),
            "precision": self.precision,
            "kernels": self.raw_model.kernels.to_dict(),  # what an exact resume runs on
            "threads": torch.get_num_threads(),  # CPU reductions split by it: so does a resume
            "tokenizer_sha256": RunDir(self.run_dir).tokenizer_digest(),  # which one it read
            "schedule": dataclasses.asdict(self.schedule),  # what a resume keeps
        }
        with self.stop.checkpointing() if self.stop else contextlib.nullcontext():
            save_checkpoint(self.run_dir, self.raw_model, meta, self.state())
        log.info("checkpoint saved at step %d", self.step)

    def check_diverged(self, what: str, loss: float) -> None:
        """Stop as failed once a loss is not finite or DIVERGED times a uniform guess's ln(V):
        a model that confident and that wrong has diverged, and its perplexity overflows."""
        uniform = math.log(self.mcfg.vocab_size)
        if not math.isfinite(loss) or loss > DIVERGED * uniform:
            t = self.cfg.train
            raise Diverged(
                f"{what} became {loss:.4g} at step {self.step} (a uniform guess scores "
                f"{uniform:.2f}); lower train.lr (now {t.lr:g}) or raise train.warmup_steps"
            )

    def evaluate(self, train_loss: float | None = None) -> None:
        """Validation metrics at this step: logged, shown, and kept as the last val loss."""
        metrics = self.objective.evaluate(self.raw_model, self.step, self.writer)
        self.model.train()
        self.check_diverged("validation loss", metrics["val/loss"])
        self.last_val = metrics["val/loss"]
        self.best_val = min(self.best_val, self.last_val)
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, self.step)
        shown = "  ".join(f"{k} {metric_text(k, v)}" for k, v in metrics.items())
        loss = "" if train_loss is None else f"  train/loss {train_loss:.4f}"
        log.info("step %d%s  %s", self.step, loss, shown)

    def fit(self, stop: GracefulStop | None = None) -> float:
        """Train to ``train.max_steps`` (or to the step a stop signal arrives in); returns the
        final validation loss."""
        self.stop = stop
        t = self.cfg.train
        # A task's rows can be shorter than seq_len: count the tokens actually read.
        tokens_per_step = t.batch_size * getattr(self.objective, "row_tokens", t.seq_len)
        bar = tqdm(
            total=t.max_steps,
            initial=self.step,
            desc="train",
            unit="step",
            disable=None if distributed.is_main() else True,
            dynamic_ncols=True,
            file=sys.stderr,
        )
        window_start, window_steps = time.perf_counter(), 0
        if self.step >= t.max_steps and distributed.is_main():
            # Resumed at the end (killed before writing results.json): the final metrics come
            # from the last evaluation, so evaluate once more (TensorBoard has it already).
            metrics = self.objective.evaluate(self.raw_model, self.step, distributed.NullWriter())
            self.last_val = metrics["val/loss"]
        if self.step == 0 and distributed.is_main():
            self.evaluate()  # the curves' first point: the untrained model
        self.model.train()
        if stop is not None:
            stop.begin()
        with logging_redirect_tqdm():  # log lines print above the bar instead of through it
            self._loop(bar, window_start, window_steps, tokens_per_step)
        bar.close()
        return self.last_val

    def positions(
        self, shape: torch.Size, rows: int, targets: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """This rank's rows of the step's positions: PoSE's (train.pose: for text the ones the
        objective read the tokens at; for task rows, laid out over each row's own tokens up to
        its last scored ``targets``) or randomized ones (pe.randomized); else None (0..T-1)."""
        sampling, pose = self.cfg.positions, self.cfg.train.pose
        if pose.enabled:
            drawn = pose_positions(
                shape[0],
                shape[1],
                pose.target_length,
                pose.chunks,
                self.cfg.seed,
                self.step,
                None if targets is None else filled_lengths(targets),
            )
        elif sampling.randomized:
            drawn = random_positions(
                shape[0], shape[1], sampling.max_position, self.cfg.seed, self.step
            )
        else:
            return None
        first = distributed.rank() * rows if distributed.active() else 0
        return to_device(drawn[first : first + rows], self.device)

    def _loop(self, bar: Any, window_start: float, window_steps: int, tokens_per_step: int) -> None:
        """The training steps, with logging, evaluation and checkpoints at their intervals."""
        t = self.cfg.train
        while self.step < t.max_steps:
            # Under torchrun: this rank's rows of the global batch, and its loss weight.
            x_all, y_all = self.objective.batch(self.step)
            x, y, weight = distributed.shard(x_all, y_all)
            x, y = to_device(x, self.device), to_device(y, self.device)
            positions = self.positions(x_all.shape, x.shape[0], y_all)
            ids = None  # data.doc_mask: the documents of each row, positions restarting in each
            if (
                docs := getattr(self.objective, "documents", lambda _: None)(self.step)
            ) is not None:
                ids, positions, _ = distributed.shard(*docs)
                ids, positions = to_device(ids, self.device), to_device(positions, self.device)
            with self.autocast(), doc_mask.documents(ids):
                loss = self.model(x, y, positions)["loss"]
            (loss if weight is None else loss * weight).backward()
            loss = loss.detach()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            lr = self.scheduler.get_last_lr()[0]
            self.scheduler.step()
            self.step += 1
            window_steps += 1
            if self.step % t.log_interval == 0 or self.step == t.max_steps:
                elapsed = time.perf_counter() - window_start
                tps = window_steps * tokens_per_step / elapsed
                loss_value = distributed.global_mean(loss, weight)
                self.check_diverged("loss", loss_value)  # where the loss is read anyway
                self.writer.add_scalar("train/loss", loss_value, self.step)
                self.writer.add_scalar("train/lr", lr, self.step)
                self.writer.add_scalar("train/grad_norm", float(grad_norm), self.step)
                self.writer.add_scalar("train/tokens_per_s", tps, self.step)
                bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{tps:,.0f}", refresh=False)
                bar.update(window_steps)
                if bar.disable and distributed.is_main():
                    # No terminal (nohup, Slurm, a sweep job): a plain line instead of the bar.
                    eta = (t.max_steps - self.step) * tokens_per_step / max(tps, 1e-9)
                    log.info(
                        "step %d/%d  loss %.4f  lr %.2e  %s tok/s  eta %s",
                        self.step,
                        t.max_steps,
                        loss_value,
                        lr,
                        f"{tps:,.0f}",
                        clock_text(eta),
                    )
                window_start, window_steps = time.perf_counter(), 0
            if self.step % t.eval_interval == 0 or self.step == t.max_steps:
                train_loss = distributed.global_mean(loss, weight)  # all ranks take part
                if distributed.is_main():  # rank 0 evaluates; the others wait at the next step
                    self.evaluate(train_loss)
            if (
                self.step % t.checkpoint_interval == 0 or self.step == t.max_steps
            ) and distributed.is_main():
                self.save()
                window_start = time.perf_counter()  # checkpoint time is not training throughput
            # Under torchrun the ranks agree on a stop through a collective, so only at log
            # steps (which sync anyway); alone, the flag is a plain read every step.
            agree = not distributed.active() or self.step % t.log_interval == 0
            if self.stop and agree and (signum := self.stop.requested(self.device)):
                if distributed.is_main() and RunDir(self.run_dir).step() != self.step:
                    self.save()
                raise self.stop.stop(signum, self.step)
