"""The optimiser and learning-rate schedule every training run uses."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from posexp.config import TrainConfig


def lr_lambda(warmup: int, total: int, min_ratio: float) -> Callable[[int], float]:
    """Linear warmup to 1, then cosine decay to ``min_ratio`` at ``total`` steps."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


@dataclass(frozen=True)
class Schedule:
    """The LR schedule a run trains with: linear warmup, then cosine decay to ``decay_steps``
    (train.min_lr from there on)."""

    warmup_steps: int
    decay_steps: int

    def factor(self, min_ratio: float) -> Callable[[int], float]:
        """The LR multiplier by step (``lr_lambda``)."""
        return lr_lambda(self.warmup_steps, self.decay_steps, min_ratio)


def saved_schedule(meta: dict[str, Any]) -> Schedule:
    """The schedule a checkpoint was trained with (its record, else its config's run length)."""
    record = meta.get("schedule")
    if isinstance(record, dict):
        return Schedule(int(record["warmup_steps"]), int(record["decay_steps"]))
    train = meta["config"]["train"]
    return Schedule(int(train["warmup_steps"]), int(train["max_steps"]))


def resume_schedule(saved: Schedule, train: Any, step: int) -> tuple[Schedule, str | None]:
    """The schedule a resume trains with, per ``train.resume_schedule``, and the line that says
    what that means when the run's length changed (None when nothing changes). ``keep`` (the
    default) never raises the LR: the decay ends where it was planned, then train.min_lr."""
    asked = Schedule(train.warmup_steps, train.max_steps)
    if asked.decay_steps == saved.decay_steps:
        return saved, None
    floor = train.min_lr / train.lr
    before = train.lr * saved.factor(floor)(step)
    if train.resume_schedule == "keep":
        after = (
            f"decays to step {saved.decay_steps:,}, then stays at train.min_lr={train.min_lr:g}"
            if saved.decay_steps < train.max_steps
            else f"reaches train.min_lr={train.min_lr:g} at step {saved.decay_steps:,}"
        )
        return saved, (
            f"LR schedule kept as the run began (train.resume_schedule=keep): it {after}; "
            f"train.resume_schedule=stretch recomputes it over train.max_steps={train.max_steps:,}"
        )
    stretched = Schedule(saved.warmup_steps, train.max_steps)
    now = train.lr * stretched.factor(floor)(step)
    return stretched, (
        f"LR schedule stretched over train.max_steps={train.max_steps:,} "
        f"(train.resume_schedule=stretch): the LR goes from {before:.3g} to {now:.3g} at step "
        f"{step + 1:,}"
    )


def build_optimizer(
    model: torch.nn.Module, train: TrainConfig, device: torch.device
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not norms), fused kernels on CUDA."""
    decay, no_decay = parameter_groups(model)
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": train.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=train.lr,
        betas=tuple(train.betas),
        fused=device.type == "cuda",
    )


def parameter_groups(
    model: torch.nn.Module,
) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """The parameters with weight decay (matrices) and without (norms, biases), in the optimizer's order."""
    params = list(model.parameters())
    return [p for p in params if p.dim() >= 2], [p for p in params if p.dim() < 2]
