"""The extrapolation view's data: a column (a PE with one method) over its seeds' jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posexp.commands.report.jobs import Job
from posexp.commands.report.stats import mean_std
from posexp.pe.base import PEDisplay


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


def seed_records(jobs: list[Job], method: str) -> dict[tuple[str, int], dict[str, Any]]:
    """One method's records over several seeds' jobs: mean, std and n of ppl per cell; a cell
    missing or unscored in any seed is unscored, with the first reason given."""
    per_job = [
        {(r["protocol"], r["length"]): r for r in job.extrapolate if r["method"] == method}
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
