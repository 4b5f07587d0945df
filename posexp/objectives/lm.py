"""The ``lm`` objective: next-token prediction on plain text, validated by perplexity."""

from __future__ import annotations

import math
from typing import Any

import torch

from posexp.config import RunConfig
from posexp.data import LMBatches, eval_windows
from posexp.data.tokens import window_documents
from posexp.objectives.base import Autocast, mean_loss, register_objective
from posexp.positions.pose import PoseBatches


@register_objective("lm")
class LanguageModeling:
    """Next-token prediction on random windows (or PoSE rows); validation on a fixed slice of
    the val split, at train.seq_len with positions 0..T-1."""

    def __init__(self, cfg: RunConfig, data: Any, device: torch.device, autocast: Autocast) -> None:
        t = cfg.train
        tokens = data.tokens["train"]
        # PoSE: rows read at skipped positions up to the target length (posexp/positions/pose.py).
        self.batches = (
            PoseBatches(tokens, t.batch_size, t.seq_len, t.pose, cfg.seed)
            if t.pose.enabled
            else LMBatches(tokens, t.batch_size, t.seq_len, cfg.seed)
        )
        self.val = eval_windows(data.tokens["val"], t.seq_len, t.eval_tokens)
        # eval-extrapolate scores the test split from one window of the training length up:
        # one too short for that would give a run no measurable cell, found only then.
        if "test" in data.tokens:
            eval_windows(data.tokens["test"], t.seq_len, t.seq_len + 1, split="test")
        self.batch_size, self.device, self.autocast = t.batch_size, device, autocast
        self.last: dict[str, float] = {}
        # data.doc_mask: each window's documents attend only within themselves (posexp.model.doc_mask)
        starts = getattr(data.tokens, "starts", {}).get("train")
        self.starts = starts if cfg.data.params.get("doc_mask") else None
        self.seq_len = t.seq_len

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The random windows (or PoSE rows) for ``step`` (a pure function of seed and step)."""
        return self.batches.batch(step)

    def documents(self, step: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """data.doc_mask: (document ids, positions restarting at each document) of the windows of
        ``step``; None when documents are not masked."""
        if self.starts is None or not isinstance(self.batches, LMBatches):
            return None
        return window_documents(self.starts, self.batches.window_starts(step), self.seq_len)

    def evaluate(self, model: torch.nn.Module, step: int, writer: Any) -> dict[str, float]:
        """Validation loss and perplexity."""
        loss = mean_loss(model, *self.val, self.batch_size, self.device, self.autocast)
        # exp overflows past 709: the trainer stops a diverged run, this only must not raise first.
        self.last = {"val/loss": loss, "val/ppl": math.exp(min(loss, 700.0))}
        return self.last

    def finish(self, model: torch.nn.Module, writer: Any) -> dict[str, float]:
        """The last validation metrics."""
        return {f"final/val_{k.split('/')[1]}": v for k, v in self.last.items()}
