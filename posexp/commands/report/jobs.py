"""The jobs a report reads: one run dir each, from its files only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.results.labels import is_plumbing, run_settings, setting_key, value_text, varying
from posexp.store.rundir import RunDir, find_runs


@dataclass
class Job:
    """One run dir of a sweep (or the run itself), read from its files only."""

    run: RunDir
    name: str

    @property
    def path(self) -> Path:
        return self.run.path

    @cached_property
    def overrides(self) -> list[str]:
        return self.run.overrides()

    @cached_property
    def params(self) -> dict[str, str]:
        """The job's overrides as key -> value (last one wins)."""
        out = {}
        for o in self.overrides:
            key, _, value = o.partition("=")
            out[key.lstrip("+~")] = value
        return out

    @cached_property
    def results(self) -> dict[str, Any] | None:
        return self.run.results()

    @cached_property
    def meta(self) -> dict[str, Any] | None:
        try:
            return self.run.meta() if self.run.has_checkpoint() else None
        except PosexpError:
            return None

    @cached_property
    def config(self) -> RunConfig | None:
        """The job's typed config; None when it has none or it is invalid (a job that failed on it)."""
        try:
            return self.run.config()
        except PosexpError:
            return None

    @property
    def status(self) -> str:
        return self.run.status()

    @cached_property
    def flat_config(self) -> dict[str, Any]:
        """The config as ``{"train.lr": 0.003, ...}``; empty when there is none."""
        from posexp.runtime.sweeps import flatten

        return flatten(self.config.to_dict()) if self.config else {}

    @cached_property
    def settings(self) -> dict[str, Any]:
        """What the run is (``posexp.results.labels.run_settings``); from its overrides without a config."""
        if self.flat_config:
            return run_settings(self.flat_config)
        return {setting_key(k): v for k, v in self.params.items() if not is_plumbing(k)}

    def setting(self, key: str) -> str:
        """A config value by its override key (``pe``, ``train.lr``) when not overridden; '' if unknown."""
        flat = self.flat_config
        value = flat.get(key, flat.get(f"{key}.name", flat.get(f"{key}.source", "")))
        return "" if value is None else str(value)

    @property
    def error(self) -> str:
        if self.results and self.results.get("error"):
            return str(self.results["error"])
        if self.status == "unreadable":
            return self.run.results_problem() or ""
        if self.status == "unfinished":
            if self.meta:
                total = f" of {self.config.train.max_steps}" if self.config else ""
                return f"no results.json; checkpoint at step {self.meta.get('step')}{total}"
            return "no results.json and no checkpoint (still running, or killed)"
        return ""

    @property
    def metrics(self) -> dict[str, Any]:
        return {k: v for k, v in (self.results or {}).items() if k not in ("status", "error")}

    @property
    def pe(self) -> str:
        if self.meta:
            return str(self.meta["model"]["pe"])
        return self.config.pe.name if self.config else self.params.get("pe", "?")

    @property
    def train_length(self) -> int | None:
        if self.meta:
            return int(self.meta["model"]["train_length"])
        return self.config.length0 if self.config else None

    @cached_property
    def evaluation(self) -> tuple[list[dict[str, Any]] | None, str | None]:
        """(the evaluation records of the job's current weights or None, why they cannot be
        read or None): a damaged ``eval/extrapolate.json`` is named, never taken for none."""
        from posexp.scoring.records import current_records

        try:
            return current_records(self.run), None
        except PosexpError as e:
            return None, str(e)

    @cached_property
    def checkpoint_problem(self) -> str | None:
        """Why the job's checkpoint could not be loaded (a file cut short or missing), or None."""
        from posexp.store.checkpoint import checkpoint_problem

        return checkpoint_problem(self.path)

    @property
    def extrapolate(self) -> list[dict[str, Any]] | None:
        """The evaluation records of the job's current weights; None when there are none."""
        return self.evaluation[0]


def find_jobs(target: Path) -> list[Job]:
    """The run dir itself, or every job dir below a sweep dir (outermost job dirs only)."""
    runs = find_runs(target)  # its errors name the folder; the command adds nothing to them
    return [
        Job(r, str(r.path.relative_to(target)) if r.path != Path(target) else r.path.name)
        for r in runs
    ]


def swept_value(job: Job, key: str) -> str:
    """A varying setting's value for ``job`` as text ('' when the job has no such setting)."""
    return value_text(job.settings[key]) if key in job.settings else ""


def swept_keys(jobs: list[Job]) -> list[str]:
    """The settings whose values differ between jobs (none for a single job), in label order;
    plumbing (threads, paths, intervals) never counts."""
    return varying([job.settings for job in jobs]) if len(jobs) > 1 else []


def natural_order(value: Any) -> tuple:
    """Sort key that orders the numbers inside a value by size: h2 < h10, 0.5 < 1.5."""
    text = "" if value is None else str(value)
    return tuple(
        (0, float(p), "") if re.fullmatch(r"-?\d+(\.\d+)?", p) else (1, 0.0, p)
        for p in re.split(r"(-?\d+(?:\.\d+)?)", text)
        if p
    )
