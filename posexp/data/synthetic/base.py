"""Synthetic tasks: the ``Task`` interface, the task registry, and held-out splits.

A task turns a size ``n`` (digits, symbols, bits, or tokens for passkey) and a random generator
into one instance ``(prompt, answer)``; a row is ``prompt <sep> answer <eos>`` with loss on the
answer. Every instance belongs to exactly one split by a hash of its prompt (``split_of``), so
a test instance is never generated for training, whatever the seeds, even at the lengths both
use. A task declares its options as keyword arguments with defaults and checks them itself.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from posexp import checks
from posexp.errors import PosexpError
from posexp.registry import Registry

# Per 100 hash buckets: 0-79 train, 80-89 val, 90-99 test (only where train lengths reach).
SPLIT_BUCKETS = {"train": range(0, 80), "val": range(80, 90), "test": range(90, 100)}
MAX_TRIES = 10_000


class Task:
    """One synthetic task; subclasses set ``name``/``unit`` and implement ``instance``."""

    name: ClassVar[str] = ""
    unit: ClassVar[str] = "symbols"  # what a length counts, for tables and axes
    min_length: ClassVar[int] = 1
    # True when prompts and answers are numbers written in digits (encodings that read digit
    # tokens, such as Abacus, apply only to these).
    numeric: ClassVar[bool] = False
    # The accuracy of guessing: a yes/no answer 0.5, a residue mod 5 0.2; reports count a task
    # as learned only well above it.
    chance: ClassVar[float] = 0.0
    # Values of the task's one evaluation variable besides length (passkey: key depth).
    variants: tuple[float, ...] = ()
    # The report view that shows its runs (posexp/commands/report/views), so no view names a task.
    report_view: ClassVar[str] = "length_generalization"
    # The scorer of its test cells (posexp/scoring): exact match of the whole answer, or
    # RULER's string_match_all over the answer's required items (``items``).
    scorer: ClassVar[str] = "exact_match"

    @property
    def parts(self) -> dict[str, Task]:
        """The tasks a mixture draws from, by name (scored apart); {} for a single task."""
        return {}

    def items(self, answer: str) -> list[str]:
        """The items an answer must contain (string_match_all); the whole answer by default."""
        return [answer]

    def prompt_symbols(self) -> str | None:
        """The characters its prompts are written in, or None for any text (prose prompts)."""
        return None

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """One (prompt, answer) of size ``n`` for ``split`` (passkey reads its filler from it)."""
        raise NotImplementedError

    def prompt_length(self, n: int) -> int:
        """Characters (byte tokens) of every prompt of size ``n``."""
        raise NotImplementedError

    def answer_length(self, n: int) -> int:
        """Most characters an answer of size ``n`` can have."""
        raise NotImplementedError

    def row_tokens(self, n: int) -> int:
        """Tokens a model reads for a full row of size ``n``: prompt, sep, answer (eos is only a target)."""
        return self.prompt_length(n) + 1 + self.answer_length(n)

    def scored_row_tokens(self, n: int) -> int:
        """Tokens of the longest row scored at size ``n`` (a mixture's: of the parts scored there)."""
        return self.row_tokens(n)


TASKS: Registry[type[Task]] = Registry("data.task")


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: register a task under ``name``."""

    def wrap(cls: type[Task]) -> type[Task]:
        TASKS.add(name, cls)
        cls.name = name
        return cls

    return wrap


def build_task(name: str, options: dict[str, Any], prefix: str = "data.") -> Task:
    """The task registered as ``name`` with ``options`` (one-line errors for bad names/options),
    whose errors name each option ``prefix`` + its name (a mixture's part: its full key)."""
    cls = TASKS.get(name)
    allowed = checks.keyword_params(cls.__init__, skip=("self",))
    for key in options:
        if key not in allowed:
            raise PosexpError(
                f"unknown option {prefix}{key} for task {name!r}; "
                f"allowed: {', '.join(allowed) or '(none)'}"
            )
    if prefix == "data." or not allowed:
        return cls(**options)
    try:
        return cls(**options)
    except PosexpError as e:
        # Each task names its options data.<name>, as set alone; inside a mixture the same
        # option sits under another key, which the message must name to be found.
        own = "|".join(map(re.escape, allowed))
        raise PosexpError(re.sub(rf"\bdata\.({own})\b", rf"{prefix}\1", str(e))) from None


def check_prompt(task: Task, prompt: str, name: str = "prompt") -> None:
    """Refuse a prompt with symbols the task never writes (one line naming them and the task's)."""
    symbols = task.prompt_symbols()
    if symbols is None:
        return
    # A model never trained on a symbol answers it with noise or nothing: say so instead.
    bad = list(dict.fromkeys(c for c in prompt if c not in symbols))
    if bad:
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise PosexpError(
            f"{name} has symbols the {task.name} task does not use: "
            f"{', '.join(map(repr, bad[:10]))}{more}; allowed: {', '.join(symbols)}"
        )


def depth_list(depths: Any) -> tuple[float, ...]:
    """The ``data.depths`` option of every task with key depths: numbers in [0, 1], at least one."""
    if not isinstance(depths, (list, tuple)) or not depths:
        raise PosexpError(f"data.depths must be a list of numbers in [0, 1], got {depths!r}")
    return tuple(checks.number(f"data.depths[{i}]", d, "in [0, 1]") for i, d in enumerate(depths))


def split_of(prompt: str) -> str:
    """The split an instance belongs to, from a hash of its prompt (stable across runs)."""
    bucket = (
        int.from_bytes(hashlib.blake2b(prompt.encode(), digest_size=8).digest(), "little") % 100
    )
    return next(s for s, r in SPLIT_BUCKETS.items() if bucket in r)


def draw(
    task: Task,
    rng: np.random.Generator,
    n: int,
    split: str,
    held_out: bool,
    variant: float | None = None,
) -> tuple[str, str]:
    """An instance of ``split``; with ``held_out`` (lengths training also uses) only one whose
    prompt hashes to ``split``, so train, val and test never share an instance."""
    for _ in range(MAX_TRIES):
        prompt, answer = task.instance(rng, n, split, variant)
        if not held_out or split_of(prompt) == split:
            return prompt, answer
    raise PosexpError(
        f"task {task.name!r} at length {n} has too few distinct instances to hold "
        f"some out for {split}; allowed: lengths with more instances"
    )


def choice_string(rng: np.random.Generator, alphabet: str, n: int) -> str:
    """``n`` symbols drawn uniformly from ``alphabet``."""
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=n))
