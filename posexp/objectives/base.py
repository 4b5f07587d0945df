"""What a training objective is, and the registry that finds one by its corpus kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from posexp.config import RunConfig
from posexp.registry import Registry

Autocast = Callable[[], Any]


class Objective(Protocol):
    """What the training loop needs from a task."""

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets (-100 = no loss) of the global batch for ``step``."""

    def evaluate(self, model: torch.nn.Module, step: int, writer: Any) -> dict[str, float]:
        """Periodic validation metrics (must include ``val/loss``), logged by the caller."""

    def finish(self, model: torch.nn.Module, writer: Any) -> dict[str, float]:
        """Final metrics for results.json and the hparams table."""


ObjectiveFactory = Callable[..., Objective]
# Keyed by the corpus kind a dataset declares (``register_dataset(name, kind=...)``): lm, pairs,
# synthetic, ... A kind with no objective here is refused with one line (``Registry.get``).
OBJECTIVES: Registry[ObjectiveFactory] = Registry("training objective for data kind")
register_objective = OBJECTIVES.register


def build_objective(
    cfg: RunConfig, data: Any, device: torch.device, autocast: Autocast
) -> Objective:
    """The objective for this run's corpus kind."""
    return OBJECTIVES.get(data.corpus.kind)(cfg, data, device, autocast)


@torch.no_grad()
def mean_loss(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    batch_size: int,
    device: torch.device,
    autocast: Autocast,
) -> float:
    """Mean per-token loss over fixed windows (tokens with target -100 excluded)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(inputs), batch_size):
        x = inputs[i : i + batch_size].to(device, non_blocking=True)
        y = targets[i : i + batch_size].to(device, non_blocking=True)
        with autocast():
            loss = model(x, y)["loss"]
        n = int((y != -100).sum())
        total, count = total + float(loss) * n, count + n
    model.train(was_training)
    return total / max(count, 1)
