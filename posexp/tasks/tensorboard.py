"""TensorBoard helpers: one writer per run dir, hparams written into that same run."""

from __future__ import annotations

from typing import Any

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams


def metric_tag(key: str) -> str | None:
    """The scalar tag that already holds a final metric: final/val_X -> val/X, final/X -> test/X."""
    name = key.removeprefix("final/")
    if name == "params":
        return None  # an hparam, not a metric
    return f"val/{name[4:]}" if name.startswith("val_") else f"test/{name}"


def write_hparams(writer: SummaryWriter, params: dict[str, Any], metrics: dict[str, float]) -> None:
    """Record an hparams entry in the writer's own run (add_hparams would create a second run).

    Its metrics point at scalars the run logged anyway (val/loss at the last step, test/bleu),
    so no extra step-0 "final" scalars clutter the run's charts.
    """
    clean = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in params.items()}
    tags = {metric_tag(k): float(v) for k, v in metrics.items() if metric_tag(k)}
    for summary in hparams(clean, tags):
        writer.file_writer.add_summary(summary)
    writer.flush()
