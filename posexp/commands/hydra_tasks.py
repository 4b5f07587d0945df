"""The functions Hydra runs for `posexp train` and `posexp finetune`, cheap to import.

A launcher pickles its task function by reference, and a Slurm job unpickles it before
submitit installs its signal handlers. Until then the time-limit signal (SIGUSR2) kills the job
outright, so the module named in the pickle imports nothing heavy: torch and the training code
load when the task runs, with the handlers in place (measured: unpickling a sweep job took
2.4 s with torch imported at the top, on an idle machine, and several times that under load).
Shell completion, which composes configs through Hydra, skips torch for the same reason.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig


def train(cfg: DictConfig) -> dict[str, Any] | None:
    """`posexp train`'s task: one training run (a sweep job under ``-m``)."""
    from posexp.commands.train import train_task

    return train_task(cfg)


def finetune(cfg: DictConfig) -> dict[str, Any] | None:
    """`posexp finetune`'s task: a new run continuing a parent at a longer length."""
    from posexp.commands.finetune import finetune_task

    return finetune_task(cfg)
