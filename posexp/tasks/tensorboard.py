"""TensorBoard helpers: one writer per run dir, hparams written into that same run."""

from __future__ import annotations

from typing import Any

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams


def write_hparams(writer: SummaryWriter, params: dict[str, Any], metrics: dict[str, float]) -> None:
    """Record an hparams entry in the writer's own run (add_hparams would create a second run)."""
    clean = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in params.items()}
    for summary in hparams(clean, {k: float(v) for k, v in metrics.items()}):
        writer.file_writer.add_summary(summary)
    for tag, value in metrics.items():
        writer.add_scalar(tag, float(value))
    writer.flush()
