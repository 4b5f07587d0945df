"""The ``synthetic`` objective: train on generated task rows, score exact-match accuracy.

Rows are ``prompt <sep> answer <eos>`` with loss on the answer and eos only. Accuracy is the
exact match of the greedy answer, computed in one teacher-forced pass: greedy decoding after
``<sep>`` reproduces the answer (and stops with eos) exactly when the model's argmax at every
answer position is the answer's token, so the pass decides it without a decoding loop (the
equivalence is tested against ``GPT.generate``).

The same pass counts the answer tokens whose argmax is right (eos left out): per-token
accuracy, the metric of Delétang et al. (2023) and Ruoss et al. (2023), which credits an answer
that is right in most places where exact match gives it nothing.

Logged at every evaluation: ``val/loss`` (answer tokens), ``val/accuracy`` and
``val/token_accuracy`` over fixed validation instances at sizes spread over the training range.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from posexp.config import RunConfig
from posexp.data.pairs import IGNORE, collate_rows
from posexp.objectives.base import Autocast, register_objective
from posexp.positions.randomized import PositionDraw, scoring_positions

Example = tuple[str, str]


def right_tokens(logits: torch.Tensor, targets: torch.Tensor, eos_id: int) -> tuple[int, int]:
    """(answer tokens whose argmax is the target, answer tokens): scored positions but eos."""
    answer = (targets != IGNORE) & (targets != eos_id)
    right = (logits.argmax(-1) == targets) & answer
    return int(right.sum()), int(answer.sum())


def exact_match(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per row, True when the argmax equals the target at every scored (non -100) position."""
    scored = targets != IGNORE
    right = (logits.argmax(-1) == targets) | ~scored
    return right.all(-1) & scored.any(-1)


@dataclass
class TaskScore:
    """Exact-match accuracy, per-token accuracy and mean answer-token loss over some instances."""

    correct: int = 0
    rows: int = 0
    loss_sum: float = 0.0
    tokens: int = 0  # scored targets: answer tokens and eos
    answer_right: int = 0
    answer_tokens: int = 0  # answer tokens, eos left out

    @property
    def accuracy(self) -> float:
        return self.correct / self.rows if self.rows else float("nan")

    @property
    def token_accuracy(self) -> float:
        """The share of answer tokens (eos left out) whose argmax is right."""
        return self.answer_right / self.answer_tokens if self.answer_tokens else float("nan")

    @property
    def loss(self) -> float:
        return self.loss_sum / self.tokens if self.tokens else float("nan")


def encode_examples(
    examples: Sequence[Example], tokenizer: Any
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) of each example."""
    return [(tokenizer.encode(p), tokenizer.encode(a)) for p, a in examples]


@torch.no_grad()
def score_examples(
    model: torch.nn.Module,
    examples: Sequence[Example],
    tokenizer: Any,
    device: torch.device,
    batch_tokens: int = 8192,
    autocast: Callable[[], Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
    positions: PositionDraw | None = None,
) -> TaskScore:
    """Teacher-forced exact-match and per-token accuracy and answer loss of ``model`` on ``examples``;
    ``positions`` draws each batch's positions (randomized runs), else 0..T-1."""
    was_training = model.training
    model.eval()
    ids = encode_examples(examples, tokenizer)
    width = max(len(p) + len(a) + 1 for p, a in ids)  # tokens read by the longest row
    per_batch = max(1, batch_tokens // width)
    score = TaskScore()
    for i in range(0, len(ids), per_batch):
        batch = ids[i : i + per_batch]
        x, y = collate_rows(batch, tokenizer, width)
        x, y = x.to(device), y.to(device)
        kwargs = {} if positions is None else {"positions": positions(*x.shape, i).to(device)}
        with (autocast or contextlib.nullcontext)():
            logits = model(x, **kwargs)["logits"].float()
        losses = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=IGNORE, reduction="sum"
        )
        score.correct += int(exact_match(logits, y).sum())
        right, answer = right_tokens(logits, y, tokenizer.eos_id)
        score.answer_right += right
        score.answer_tokens += answer
        score.rows += len(x)
        score.loss_sum += float(losses)
        score.tokens += int((y != IGNORE).sum())
        if on_batch is not None:
            on_batch(sum(len(p) + len(a) + 1 for p, a in batch))
    model.train(was_training)
    return score


@register_objective("synthetic")
class SyntheticTask:
    """Fresh task instances every step; validation accuracy on fixed held-out instances."""

    def __init__(self, cfg: RunConfig, data: Any, device: torch.device, autocast: Autocast) -> None:
        self.data, self.tokenizer = data.corpus.task, data.tokenizer
        self.seed, self.batch_size = cfg.seed, cfg.train.batch_size
        # Rows are padded to the longest training row, not seq_len (which only bounds it).
        self.row_tokens = self.data.longest_train_row()
        self.device, self.autocast = device, autocast
        # Randomized runs: as in training; any other run (PoSE too, a training-time method)
        # is scored at 0..T-1.
        self.positions = scoring_positions(cfg.positions)
        sizes = self.data.val_sizes()
        self.val = [
            ex for n in sizes for ex in self.data.examples("val", n, self.data.val_examples)
        ]
        self.last: dict[str, float] = {}

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows for ``step``, a pure function of (seed, step), padded to the longest training row
        (PoSE keeps them whole; the trainer skips their positions, ``posexp.positions.pose``)."""
        examples = self.data.train_batch(self.seed, step, self.batch_size)
        loss_on = "all" if self.data.loss_on == "all" else "target"
        return collate_rows(
            encode_examples(examples, self.tokenizer), self.tokenizer, self.row_tokens, loss_on
        )

    def evaluate(self, model: torch.nn.Module, step: int, writer: Any) -> dict[str, float]:
        """Answer-token loss, exact-match and per-token accuracy on the validation instances."""
        score = score_examples(
            model,
            self.val,
            self.tokenizer,
            self.device,
            autocast=self.autocast,
            positions=self.positions,
        )
        self.last = {
            "val/loss": score.loss,
            "val/accuracy": score.accuracy,
            "val/token_accuracy": score.token_accuracy,
        }
        return self.last

    def finish(self, model: torch.nn.Module, writer: Any) -> dict[str, float]:
        """The last validation metrics, and the answer perplexity."""
        out = {f"final/val_{k.split('/')[1]}": v for k, v in self.last.items()}
        if "val/loss" in self.last:
            out["final/val_ppl"] = math.exp(min(self.last["val/loss"], 700))
        return out
