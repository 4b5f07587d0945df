"""The optimiser and learning-rate schedule every training run uses."""

from __future__ import annotations

import math
from collections.abc import Callable

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
