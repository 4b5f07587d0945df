"""`posexp report DIR`: a Markdown/CSV/PNG report of any sweep or run dir.

The generic part works for any free-form sweep: one row per job keyed by the swept parameters
(the ``.hydra/overrides.yaml`` keys whose values differ between jobs), with the job's status
(completed / failed + its error / unfinished) and every metric of its ``results.json``. The
views (``posexp/commands/report/views/``) add the sections of each kind of experiment.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from posexp.commands.report.jobs import Job, find_jobs, swept_keys
from posexp.commands.report.runs_section import runs_section
from posexp.commands.report.view import ReportContext
from posexp.commands.report.views import load_views
from posexp.config import DEVICES
from posexp.errors import PosexpError, choose
from posexp.files import check_writable, write_csv_atomic, write_text_atomic
from posexp.rundir import RunDir

log = logging.getLogger("posexp")


def pending_evaluations(jobs: list[Job]) -> list[Job]:
    """Completed jobs whose config asks for an extrapolation eval (a preset) and lack one."""
    return [
        j
        for j in jobs
        if j.status == "completed"
        and j.meta
        and j.extrapolate is None
        and j.config
        and j.config.to_dict()["extrapolate"]
    ]


def write_report(
    target: Path | str, evaluate: bool = True, device: str = "auto", console: Any = None
) -> list[Path]:
    """Write ``report.md``, ``report.csv`` and the views' CSVs and PNGs into ``target``."""
    from rich.console import Console

    console = console or Console()
    target = Path(target)
    choose("--device", device, DEVICES)
    jobs = find_jobs(target)
    check_writable(target, "report folder")
    # One writer per folder: refused while a run trains in it (and so writes into it).
    with RunDir(target).writing("report folder"):
        return _write_report(target, jobs, evaluate, device, console)


def _write_report(
    target: Path, jobs: list[Job], evaluate: bool, device: str, console: Any
) -> list[Path]:
    """``write_report`` once this process holds the folder's lock."""
    pending = pending_evaluations(jobs)
    if pending and evaluate:
        for job, who in [(j, j.run.holder()) for j in pending]:
            if who:  # another process writes that run now: evaluate the others
                console.print(
                    f"{job.path}: not evaluated: another posexp process ({who}) is writing it",
                    soft_wrap=True,
                    highlight=False,
                )
                pending.remove(job)
    if pending and evaluate:
        from posexp.commands.extrapolate.evaluate import evaluate_runs
        from posexp.commands.extrapolate.plan import Settings

        console.print(
            f"evaluating {len(pending)} run(s) at longer lengths first (their config "
            f"has an `extrapolate:` section; --no-eval skips this)",
            highlight=False,
        )
        try:
            evaluate_runs([job.path for job in pending], Settings(device=device), console=console)
        except PosexpError as e:  # a damaged job: the report of the others is still written
            console.print(
                f"report: some evaluations failed: {e}; their jobs are reported without one",
                soft_wrap=True,
                highlight=False,
            )
        jobs = find_jobs(target)
    ctx = ReportContext(target, jobs, swept_keys(jobs))
    runs_md, csv_rows = runs_section(ctx)
    csv_path = target / "report.csv"
    write_csv_atomic(csv_path, csv_rows)
    sections = [
        f"# Report: {target.name}",
        "",
        f"Made by `posexp report {target}`.",
        "",
        "## Runs",
        "",
        runs_md,
    ]
    for view in load_views():
        if view.detect(jobs):
            sections += ["", view.render(ctx)]
    md_path = target / "report.md"
    write_text_atomic(md_path, "\n".join(sections).rstrip() + "\n")
    files = [md_path, csv_path, *ctx.files]
    console.print(f"wrote {', '.join(str(f) for f in files)}", soft_wrap=True, highlight=False)
    return files
