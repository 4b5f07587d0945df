"""Training objectives, keyed by the corpus kind: what a batch is and what evaluation reports.

``lm`` (plain text) is defined here; ``pairs`` (translation) lives in ``translation.py``. A new
kind registers its own factory and touches nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch

from posexp.config import RunConfig
from posexp.data import LMBatches, eval_windows
from posexp.errors import PosexpError

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
OBJECTIVES: dict[str, ObjectiveFactory] = {}


def register_objective(kind: str) -> Callable[[ObjectiveFactory], ObjectiveFactory]:
    """Register the objective used for corpora of ``kind``."""

    def wrap(factory: ObjectiveFactory) -> ObjectiveFactory:
        OBJECTIVES[kind] = factory
        return factory

    return wrap


def build_objective(cfg: RunConfig, data: Any, device: torch.device, autocast: Autocast) -> Objective:
    """The objective for this run's corpus kind."""
    kind = data.corpus.kind
    if kind not in OBJECTIVES:
        raise PosexpError(f"no training objective for data kind {kind!r}; allowed: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[kind](cfg, data, device, autocast)


@torch.no_grad()
def mean_loss(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int,
              device: torch.device, autocast: Autocast) -> float:
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


@register_objective("lm")
class LanguageModeling:
    """Next-token prediction on random windows; validation on a fixed slice of the val split."""

    def __init__(self, cfg: RunConfig, data: Any, device: torch.device, autocast: Autocast) -> None:
        t = cfg.train
        self.batches = LMBatches(data.tokens["train"], t.batch_size, t.seq_len, cfg.seed)
        self.val = eval_windows(data.tokens["val"], t.seq_len, t.eval_tokens)
        self.batch_size, self.device, self.autocast = t.batch_size, device, autocast
        self.last: dict[str, float] = {}

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The random windows for ``step`` (a pure function of seed and step)."""
        return self.batches.batch(step)

    def evaluate(self, model: torch.nn.Module, step: int, writer: Any) -> dict[str, float]:
        """Validation loss and perplexity."""
        loss = mean_loss(model, *self.val, self.batch_size, self.device, self.autocast)
        self.last = {"val/loss": loss, "val/ppl": math.exp(loss)}
        return self.last

    def finish(self, model: torch.nn.Module, writer: Any) -> dict[str, float]:
        """The last validation metrics."""
        return {f"final/val_{k.split('/')[1]}": v for k, v in self.last.items()}
