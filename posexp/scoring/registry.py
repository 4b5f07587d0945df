"""What a scorer is: one protocol or metric of `posexp eval-extrapolate`, found by name.

A scorer module registers a ``Scorer``: its name (the record's ``protocol``), the kind of run it
scores (``text``: windows over the test split of a language model; ``task``: test instances of
a synthetic task), its headline ``Metric``, the record fields it fills, how it cuts a cell's
work once the data is known, and how it scores that work with a model. Records, tables, plots,
TensorBoard and the report read these declarations, so a new metric is one module of this
package (and its test) and touches nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posexp.errors import PosexpError
from posexp.registry import Registry

if TYPE_CHECKING:  # annotations only: listing protocols needs no torch
    import torch

TEXT, TASK = "text", "task"


@dataclass(frozen=True)
class Metric:
    """A scorer's headline number: the record field holding it and how to show it."""

    name: str  # the record field: "ppl", "accuracy"
    label: str  # axis and table text: "test perplexity"
    higher_is_better: bool
    log_scale: bool  # plotted on a log axis (perplexities), else on [0, 1]
    decimals: int

    def format(self, value: Any) -> str:
        """The value with the metric's decimals, '—' when missing."""
        if value is None:
            return "—"
        return f"{value:,.{self.decimals}f}" if abs(value) < 1e5 else f"{value:.2e}"


PPL = Metric("ppl", "test perplexity", higher_is_better=False, log_scale=True, decimals=2)
ACCURACY = Metric("accuracy", "exact-match accuracy", True, log_scale=False, decimals=3)


@dataclass
class Work:
    """What one cell scores, cut once the data is known: ``size`` tokens read (the progress
    bar's unit), the scorer's own ``data`` (windows, instances), or a ``note`` saying why the
    cell cannot be scored (the test split is too short)."""

    size: int
    data: Any = None
    note: str = ""
    # How far into the test split its windows read (an index past the last target): windows
    # placed at documents' starts go past the first ``n_tokens`` targets the others score.
    reach: int = 0


@dataclass
class Scoring:
    """What a scorer scores with: the device and the arithmetic, and the run's data."""

    device: torch.device
    batch_tokens: int
    autocast: Callable[[], Any] = contextlib.nullcontext
    advance: Callable[[int], None] = lambda n: None  # tokens read so far, for the progress bar
    tokens: torch.Tensor | None = None  # text runs: the test split, 1-D
    tokenizer: Any = None  # task runs
    positions: Any = None  # task runs: how positions are drawn (randomized-position runs)


@dataclass(frozen=True)
class Scorer:
    """One protocol or metric (see the module docstring)."""

    name: str
    kind: str  # TEXT or TASK
    metric: Metric
    fields: tuple[str, ...]  # the record fields ``score`` fills (the headline metric among them)
    # (cell, source) -> Work. source: text, the count of test targets to score (the cell's
    # sample size capped to the split); task, the run's SyntheticData.
    cut: Callable[[Any, Any], Work]
    # (model, work, scoring) -> {field: value} for every name in ``fields``.
    score: Callable[[Any, Work, Scoring], dict[str, Any]]
    uses_stride: bool = False  # the cell's stride changes its value (sliding windows)
    # Fields holding a list of numbers (a curve over position buckets), None where unmeasured;
    # the context-use view reads them, the length tables leave them out.
    lists: tuple[str, ...] = ()


SCORERS: Registry[Scorer] = Registry("protocol")


def register_scorer(scorer: Scorer) -> Scorer:
    """Add ``scorer`` under its name (a name registered twice is refused)."""
    if scorer.kind not in (TEXT, TASK):
        raise ValueError(f"scorer {scorer.name!r}: kind must be {TEXT!r} or {TASK!r}")
    if scorer.metric.name not in scorer.fields:
        raise ValueError(f"scorer {scorer.name!r}: fields must include {scorer.metric.name!r}")
    if not set(scorer.lists) <= set(scorer.fields):
        raise ValueError(f"scorer {scorer.name!r}: lists must be among its fields")
    return SCORERS.add(scorer.name, scorer)


def get_scorer(name: str) -> Scorer:
    """The scorer registered as ``name``, else one line listing them."""
    return SCORERS.get(name)


def scorer_names(kind: str) -> list[str]:
    """The registered scorers of one kind, in registration order."""
    return [name for name, s in SCORERS.items() if s.kind == kind]


def metric_of(protocol: str) -> Metric:
    """The headline metric of a protocol; perplexity for one no longer registered."""
    return SCORERS[protocol].metric if protocol in SCORERS else PPL


# A name for several protocols at once (the ALiBi paper reports both).
ALIASES = {"both": ("nonoverlap", "sliding")}


def parse_protocols(value: Any, where: str = "--protocol") -> list[str] | None:
    """Text protocols from a comma list or a list (``both``: nonoverlap and sliding), in order,
    each registered; None when none is given."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    allowed = scorer_names(TEXT)
    out: list[str] = []
    for item in (str(i).strip() for i in items):
        for name in ALIASES.get(item, (item,)):
            if name not in allowed:
                raise PosexpError(
                    f"unknown {where} {name!r}; allowed: {', '.join([*allowed, *ALIASES])}"
                )
            out.append(name)
    return list(dict.fromkeys(out)) or None
