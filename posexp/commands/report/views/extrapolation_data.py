"""The extrapolation view's data: a column (a PE with one method) over its seeds' jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posexp.commands.report.jobs import Job
from posexp.commands.report.stats import mean_std
from posexp.pe.base import PEDisplay
from posexp.results.summary import SERIES_FIELDS


@dataclass
class Column:
    """One column of the extrapolation table: a PE with one method, over its seeds' jobs.

    ``records[(protocol, length)]`` is the first seed's record with ``ppl`` replaced by the mean
    over seeds, plus ``ppl_std`` (sample std), ``n`` and ``ppls`` (per seed, in ``jobs`` order).
    """

    label: str  # shown in tables and legends (the PE's declared label)
    job: Job  # the first seed's job
    method: str
    records: dict[tuple[str, int], dict[str, Any]]
    key: str = ""  # its CSV column (the PE's registered name); "": the label
    pe: PEDisplay | None = None
    jobs: list[Job] = field(default_factory=list)
    series: str = ""  # the sample it was scored on where its PE has several: "tokens 16,384"
    l0: int | None = None  # the length its positions were learned at (a fine-tune's parent's)
    tuned_at: int | None = None  # a `posexp finetune` run's own training length; None: none

    @property
    def trained_length(self) -> int | None:
        """The longest length its weights trained at: a fine-tune's own, else L0."""
        return self.tuned_at or self.l0


def fine_tune_length(job: Job) -> int | None:
    """The length a `posexp finetune` run trained at (``job.train_length`` is its parent's L0);
    None for a run trained from scratch."""
    flat = job.flat_config
    if flat.get("parent") in (None, "", "None"):
        return None
    if flat.get("train.pose.enabled") is True and flat.get("train.pose.target_length"):
        # PoSE trains rows of train.seq_len whose positions span its target length.
        return int(flat["train.pose.target_length"])
    return int(flat.get("train.seq_len") or job.train_length)


def series_fields(jobs: list[Job]) -> list[str]:
    """The key fields (sample size, stride, precision) that take more than one value among one
    protocol's records of these jobs: their cells are different measurements, kept apart."""
    out = []
    for name, _ in SERIES_FIELDS:
        seen: dict[str, set[Any]] = {}
        for job in jobs:
            for r in job.extrapolate or []:
                if r.get(name) is not None:
                    seen.setdefault(r["protocol"], set()).add(r[name])
        if any(len(values) > 1 for values in seen.values()):
            out.append(name)
    return out


def series_of(record: dict[str, Any], fields: list[str]) -> tuple[Any, ...]:
    """The values of ``fields`` that place a record in its series."""
    return tuple(record.get(name) for name in fields)


def series_text(series: tuple[Any, ...], fields: list[str]) -> str:
    """A series as eval-extrapolate's tables name it: ``tokens 16,384, stride 32``."""
    texts = dict(SERIES_FIELDS)
    return ", ".join(
        texts[name].format(value) for name, value in zip(fields, series, strict=True) if value
    )


def sample_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """How a record was scored: its sample size, stride and precision."""
    return tuple(record.get(name) for name, _ in SERIES_FIELDS)


def same_sample(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two records scored the same sample the same way (like with like)."""
    return sample_key(a) == sample_key(b)


def seed_records(
    jobs: list[Job], method: str, series: dict[str, Any] | None = None
) -> dict[tuple[str, int], dict[str, Any]]:
    """One method's records over several seeds' jobs, those of one ``series`` (key field ->
    value): mean, std and n of ppl per cell; a cell missing or unscored in any seed is unscored,
    with the first reason given."""
    wanted = series or {}
    per_job = [
        {
            (r["protocol"], r["length"]): r
            for r in job.extrapolate or []
            if r["method"] == method and all(r.get(k) == v for k, v in wanted.items())
        }
        for job in jobs
    ]
    out = {}
    for cell in dict.fromkeys(k for recs in per_job for k in recs):
        recs = [recs.get(cell) for recs in per_job]
        first = next(r for r in recs if r)
        ppls = [r["ppl"] for r in recs if r and r.get("ppl") is not None]
        if len(ppls) == len(recs):
            mean, std = mean_std(ppls)
            out[cell] = {**first, "ppl": mean, "ppl_std": std, "n": len(ppls), "ppls": ppls}
        else:
            note = next((r.get("note") for r in recs if r and r.get("note")), None)
            missing = f"scored in {len(ppls)} of {len(recs)} seeds"
            out[cell] = {
                **first,
                "ppl": None,
                "n": len(ppls),
                "ppls": ppls,
                "note": note or missing,
            }
    return out
