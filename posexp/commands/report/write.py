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

from posexp.checks import user_path
from posexp.commands.report.jobs import Job, find_jobs, swept_keys
from posexp.commands.report.runs_section import runs_section
from posexp.commands.report.view import ReportContext
from posexp.commands.report.views import load_views
from posexp.config import DEVICES
from posexp.errors import PosexpError, choose
from posexp.store.files import check_writable, staged_files, write_csv_atomic, write_text_atomic
from posexp.store.rundir import RunDir

log = logging.getLogger("posexp")


def pending_evaluations(jobs: list[Job], methods: bool = False) -> list[Job]:
    """Completed jobs whose config asks for an extrapolation eval (a preset's ``extrapolate:``
    section), or every completed job when ``methods`` are given: their evaluation scores only
    the cells not yet measured."""
    return [
        j
        for j in jobs
        if j.status == "completed"
        and j.meta
        and j.config
        and (methods or j.config.to_dict()["extrapolate"])
    ]


def asked_for(methods: list[Any] | None) -> str:
    """The cells a report's evaluation scores, in words: a preset's, or those of --method at a
    preset's lengths, else at eval-extrapolate's defaults."""
    from posexp.commands.extrapolate.plan import DEFAULT_LEN

    if not methods:
        return "the cells their preset (`extrapolate:` section) asks for"
    return (
        f"the cells of --method {','.join(map(str, methods))}, at the lengths their preset "
        "(`extrapolate:` section) asks for, else at eval-extrapolate's defaults (lengths "
        f"doubling from the training length to {DEFAULT_LEN})"
    )


def write_report(
    target: Path | str,
    evaluate: bool = True,
    device: str = "auto",
    console: Any = None,
    methods: list[str] | None = None,
    workers: int | None = None,
) -> list[Path]:
    """Write ``report.md``, ``report.csv`` and the views' CSVs and PNGs into ``target``, after
    scoring the cells the jobs' presets (or ``methods``) ask for that are not yet measured."""
    from posexp.commands.console import stdout_console
    from posexp.commands.extrapolate.plan import Settings
    from posexp.config import ExtrapolateConfig

    console = console or stdout_console()
    target = user_path("report target", target)
    choose("--device", device, DEVICES)
    # Checked before any job is read: a bad spec is one line, nothing written.
    settings = Settings(
        ExtrapolateConfig.from_dict({"method": methods}, prefix="--"), device, workers=workers
    )
    settings.validate()
    jobs = find_jobs(target)
    check_writable(target, "report folder")
    # One writer per folder: refused while a run trains in it (and so writes into it).
    with RunDir(target).writing("report folder"):
        return _write_report(target, jobs, evaluate, settings, console)


def _write_report(
    target: Path, jobs: list[Job], evaluate: bool, settings: Any, console: Any
) -> list[Path]:
    """``write_report`` once this process holds the folder's lock."""
    pending = pending_evaluations(jobs, methods=settings.extrapolate.method is not None)
    if pending and evaluate:
        for job, who in [(j, j.run.holder()) for j in pending]:
            if who:  # another process writes that run now: evaluate the others
                console.print(
                    f"{job.path}: not evaluated: another posexp process ({who}) is writing it",
                    soft_wrap=True,
                    highlight=False,
                    markup=False,
                )
                pending.remove(job)
    if pending and evaluate:
        from posexp.commands.extrapolate.evaluate import evaluate_runs

        console.print(
            f"evaluating {len(pending)} run(s) at longer lengths first: "
            f"{asked_for(settings.extrapolate.method)} that are not yet measured "
            "(--no-eval skips this)",
            highlight=False,
            markup=False,
        )
        try:
            evaluate_runs([job.path for job in pending], settings, console=console, tables=False)
        except PosexpError as e:  # a damaged job: the report of the others is still written
            console.print(
                f"report: some evaluations failed: {e}; their jobs are reported without one",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
        jobs = find_jobs(target)
    with staged_files(target):  # report.md, report.csv and the views' files appear together
        ctx, files = _write_files(target, jobs, console)
    # The figures are read back once they are in place (a staged file is not there until then).
    events = _tensorboard_images(target, ctx, files)
    if events is not None:  # the figures in TensorBoard's images tab too
        files.append(events)
    console.print(
        f"wrote {', '.join(str(f) for f in files)}", soft_wrap=True, highlight=False, markup=False
    )
    return files


def _tensorboard_images(target: Path, ctx: ReportContext, files: list[Path]) -> Path | None:
    """The report's figures as an event file (TensorBoard's images tab); the last report's when
    they are the same figures."""
    from posexp.runtime.tensorboard import REPORT_EVENTS, write_report_images

    pngs = [f for f in files if f.suffix == ".png"]
    shown = b"".join(f.name.encode() + f.read_bytes() for f in pngs)
    kept = sorted(target.glob(f"events.out.tfevents.*{REPORT_EVENTS}"))
    same = ctx.same_as_last("tensorboard images", shown) and kept
    events = kept[-1] if same else write_report_images(target, pngs)
    ctx.save_drawn()
    return events


def _write_files(target: Path, jobs: list[Job], console: Any) -> tuple[ReportContext, list[Path]]:
    """The report's files, from ``jobs`` as they are now, and the context that drew them."""
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
    damaged = [(job, job.evaluation[1]) for job in jobs if job.evaluation[1]]
    if damaged:
        sections += ["", "## Evaluations that could not be read", ""]
        for job, problem in damaged:
            sections.append(f"- `{job.name}`: {problem}")
            console.print(
                f"{job.path}: evaluation not read: {problem}", soft_wrap=True, markup=False
            )
    broken = [(job, job.checkpoint_problem) for job in jobs if job.checkpoint_problem]
    if broken:  # listed with their results, which the weights can no longer reproduce
        sections += ["", "## Checkpoints that could not be loaded", ""]
        for job, problem in broken:
            sections.append(f"- `{job.name}`: {problem}")
            console.print(
                f"{job.path}: checkpoint damaged: {problem}", soft_wrap=True, markup=False
            )
    md_path = target / "report.md"
    write_text_atomic(md_path, "\n".join(sections).rstrip() + "\n")
    return ctx, [md_path, csv_path, *ctx.files]
