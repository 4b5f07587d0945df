"""``data=synthetic``: length-generalization tasks generated from a seed, no files.

``data.task`` names a task (one module in this package each, found by name); training draws
fresh instances at sizes in ``data.train_lengths`` = [min, max] every step, from (run seed,
step); validation and test instances come from ``data.seed``, so every run of a sweep is
scored on the same ones. Test sizes (``data.test_lengths``) usually lie beyond the training
range; where they do not, the hash split in ``base.py`` keeps test instances out of training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from posexp import checks
from posexp.checks import integer, positive_int
from posexp.data.registry import SPLITS, Corpus, register_dataset
from posexp.data.synthetic.base import TASKS, Task, build_task, draw, register_task
from posexp.errors import PosexpError
from posexp.registry import discover

discover(__name__, __path__, skip=("base",))  # every task module registers itself

SPLIT_INDEX = {s: i for i, s in enumerate(SPLITS)}
# What training rows carry loss on: the answer (and eos), or every token, prompt included (a
# language-model loss that teaches the copying a retrieval answer needs; scoring reads answers).
LOSS_ON = ("answer", "all")


@dataclass
class SyntheticData:
    """A task with its training range, test sizes and evaluation set sizes."""

    task: Task
    train_lengths: tuple[int, int]
    test_lengths: list[int]
    val_examples: int
    test_examples: int
    seed: int
    loss_on: str = "answer"  # training rows' loss: the answer only, or every token ("all")

    def trained_at(self, n: int) -> bool:
        """True for sizes training draws from (where instances must be held out by hash)."""
        return self.train_lengths[0] <= n <= self.train_lengths[1]

    def examples(
        self, split: str, n: int, count: int, variant: float | None = None, part: str | None = None
    ) -> list[tuple[str, str]]:
        """``count`` fixed instances of size ``n`` for val or test (a pure function of data.seed),
        of the mixture's ``part`` when given."""
        key = [self.seed, SPLIT_INDEX[split], n, 0 if variant is None else 1 + round(variant * 1e6)]
        task = self.task
        if part is not None:
            task = self.part(part)
            key.append(1 + list(self.task.parts).index(part))
        rng = np.random.default_rng(key)
        return [draw(task, rng, n, split, self.trained_at(n), variant) for _ in range(count)]

    def part(self, name: str) -> Task:
        """The mixture's task ``name`` (one line naming the parts otherwise)."""
        parts = self.task.parts
        if name not in parts:
            raise PosexpError(
                f"task {name!r} is not part of this {self.task.name} run; "
                f"allowed: {', '.join(parts) or '(none: a single task)'}"
            )
        return parts[name]

    def train_batch(self, seed: int, step: int, batch_size: int) -> list[tuple[str, str]]:
        """Training instances for ``step``: sizes uniform in the training range."""
        rng = np.random.default_rng([seed, step, 0x5EED])
        lo, hi = self.train_lengths
        sizes = rng.integers(lo, hi + 1, size=batch_size)
        return [draw(self.task, rng, int(n), "train", True) for n in sizes]

    def val_sizes(self) -> list[int]:
        """Up to 8 sizes spread over the upper half of the training range, for validation (the
        smallest sizes may have too few distinct instances to hold any out)."""
        lo, hi = self.train_lengths
        lo = (lo + hi + 1) // 2
        return sorted({int(round(x)) for x in np.linspace(lo, hi, min(8, hi - lo + 1))})

    def longest_train_row(self) -> int:
        """Tokens the model reads for the longest training row."""
        return self.task.row_tokens(self.train_lengths[1])


def _lengths(value: Any) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise PosexpError(f"data.train_lengths must be [min, max], got {value!r}")
    lo, hi = (positive_int("data.train_lengths", v) for v in value)
    if lo > hi:
        raise PosexpError(
            f"data.train_lengths must be [min, max] with min <= max, got {list(value)}"
        )
    return lo, hi


def check_synthetic(params: dict[str, Any], seq_len: int | None) -> int:
    """Validate a synthetic data config (and that its longest training row fits seq_len);
    returns that row's tokens."""
    data = make_data(**params)
    need = data.longest_train_row()
    if seq_len is not None and need > seq_len:
        raise PosexpError(
            f"train.seq_len={seq_len} is too short for {data.task.name} rows of size "
            f"{data.train_lengths[1]} ({need} tokens); allowed: train.seq_len >= {need}"
        )
    return need


def make_data(
    task: str = "copy",
    train_lengths: Any = (1, 20),
    test_lengths: Any = (20, 30, 40),
    val_examples: int = 64,
    test_examples: int = 100,
    seed: int = 0,
    loss_on: str = "answer",
    **options: Any,
) -> SyntheticData:
    """Build and check the task and its settings (one-line errors naming data.<key>)."""
    if not isinstance(task, str):
        raise PosexpError(f"data.task must be a task name, got {task!r}")
    t = build_task(task, options)
    lo, hi = _lengths(train_lengths)
    if not isinstance(test_lengths, (list, tuple)) or not test_lengths:
        raise PosexpError(f"data.test_lengths must be a list of sizes, got {test_lengths!r}")
    tests = sorted({positive_int("data.test_lengths", n) for n in test_lengths})
    for n in (lo, *tests):
        if n < t.min_length:
            raise PosexpError(f"task {task!r} needs sizes >= {t.min_length} {t.unit}, got {n}")
    return SyntheticData(
        t,
        (lo, hi),
        tests,
        positive_int("data.val_examples", val_examples),
        positive_int("data.test_examples", test_examples),
        integer("data.seed", seed, low=0),
        checks.choice("data.loss_on", loss_on, LOSS_ON),
    )


@register_dataset("synthetic", kind="synthetic", check=check_synthetic, tokenizers=("byte",))
def load_synthetic(**params: Any) -> Corpus:
    """A synthetic task as a corpus of kind "synthetic" (no documents; instances on demand);
    ``make_data`` names and checks the parameters."""
    return Corpus(splits={s: [] for s in SPLITS}, kind="synthetic", task=make_data(**params))


__all__ = ["TASKS", "SyntheticData", "Task", "build_task", "make_data", "register_task"]
