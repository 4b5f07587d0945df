"""Scoring the runs of an evaluation: one after another, or in worker processes side by side.

On the CPU the tiny models keep a core busy only with one thread, so the cells of several runs
are scored at once in worker processes, one per core by default, each with its share of the
cores as torch threads (never more threads than cores in all). A task is one method of one run
(its cells share the model), the largest first, so the workers stay busy to the end; each run's
records are merged and its files written in this process once all its methods are in. A worker
also sends each cell's record back as it finishes it, so a stop (Ctrl-C, SIGTERM) keeps every
cell finished, as scoring in this process does. The workers ignore both signals, which reach
every process of a terminal's group or a Slurm job at once: this process reads their cells,
then ends them (SIGKILL); killed itself, it takes them with it (each ends when its parent
does). One progress bar covers every cell: tokens read (rate and ETA) and cells done
(``progress``). On a GPU the runs go one after another in this process (one device).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import torch

from posexp.commands.extrapolate.crashes import after_a_crash, how_it_ended
from posexp.commands.extrapolate.plan import RunPlan, RunResult, Settings, needs_test_split
from posexp.commands.extrapolate.progress import Progress, QueueProgress, scoring_text
from posexp.commands.extrapolate.score_run import (
    evaluate_plan,
    keep_before_stop,
    load_test_tokens,
    score_cells,
    write_merged,
)
from posexp.errors import PosexpError
from posexp.extension.spec import MethodSpec
from posexp.runtime.hardware import usable_cores
from posexp.runtime.stops import STOP_SIGNALS, as_stop, held, raise_if_stopped, stopped
from posexp.scoring.records import Record


class Scored:
    """The records the workers sent back, by run: those of each method finished (its task's
    result), and, for a method still scoring, each cell as it was done."""

    def __init__(self, runs: list[Path]) -> None:
        self.methods: dict[Path, list[Record]] = {run: [] for run in runs}
        self.cells: dict[tuple[Path, MethodSpec], list[Record]] = {}
        self.finished: set[tuple[Path, MethodSpec]] = set()

    def cell(self, run: Path, record: Record) -> None:
        """One cell of a method still scoring (its task's result may come first: then it is in)."""
        if (run, record.spec) not in self.finished:
            self.cells.setdefault((run, record.spec), []).append(record)

    def method(self, run: Path, label: MethodSpec, records: list[Record]) -> None:
        """Every cell of one method of ``run``: its task's result."""
        self.finished.add((run, label))
        self.cells.pop((run, label), None)
        self.methods[run] += records

    def of(self, run: Path) -> list[Record]:
        """Every cell of ``run`` scored so far: its methods finished, then the others' cells."""
        return self.methods[run] + [
            r for (at, _), cells in self.cells.items() if at == run for r in cells
        ]


def worker_plan(settings: Settings, device: torch.device, runs: int, tasks: int) -> tuple[int, int]:
    """(worker processes, torch threads each) for ``tasks`` tasks of ``runs`` runs: workers on
    the CPU for several runs (or when asked for), one per core unless ``--workers`` says."""
    cores = usable_cores()
    alone = runs < 2 and settings.workers is None
    if device.type != "cpu" or alone or settings.workers == 1 or tasks < 2:
        return 1, settings.threads or torch.get_num_threads()
    workers = min(tasks, settings.workers or cores)
    return workers, settings.threads or max(1, cores // workers)


def score_plans(
    plans: list[RunPlan],
    settings: Settings,
    device: torch.device,
    progress: bool | None,
    data_cache: dict[str, Any],
    skipped: Any,
    several: bool,
) -> dict[Path, RunResult]:
    """Score every plan's cells still to score; the results by run dir (a run that failed is
    named by ``skipped`` and left out)."""
    if not plans:
        return {}
    bar = Progress(
        sum(item.size for plan in plans for item in plan.todo),
        sum(len(plan.todo) for plan in plans),
        progress,
        scoring_text(plans),
    )
    try:
        tasks = method_tasks(plans)
        workers, threads = worker_plan(settings, device, len(plans), len(tasks))
        if workers == 1:
            return score_here(plans, settings, device, bar, data_cache, skipped, several, threads)
        return score_in_workers(tasks, settings, bar, skipped, several, workers, threads)
    finally:
        bar.close()


def method_tasks(plans: list[RunPlan]) -> list[tuple[RunPlan, MethodSpec, int]]:
    """(plan, method spec, tokens of work) for every method of every run with cells to score,
    the largest first, so the workers finish together (longest-processing-time order)."""
    tasks = []
    for plan in plans:
        sizes: dict[MethodSpec, int] = {}
        for item in plan.todo:
            sizes[item.record.spec] = sizes.get(item.record.spec, 0) + item.size
        tasks += [(plan, label, size) for label, size in sizes.items()]
    return sorted(tasks, key=lambda task: -task[2])


def score_here(
    plans: list[RunPlan],
    settings: Settings,
    device: torch.device,
    bar: Progress,
    data_cache: dict[str, Any],
    skipped: Any,
    several: bool,
    threads: int,
) -> dict[Path, RunResult]:
    """The runs one after another in this process."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        results = {}
        for plan in plans:
            test = (
                load_test_tokens(plan.cfg, data_cache, plan.run.tokenizer_file)
                if needs_test_split(plan)
                else None
            )
            result = skipped.guard(
                plan.run_dir,
                lambda plan=plan, test=test: evaluate_plan(
                    plan, test, device, settings.batch_tokens, bar
                ),
                several,
            )
            if result is not None:
                results[plan.run_dir] = result
        return results
    finally:
        torch.set_num_threads(saved)


def score_in_workers(
    tasks: list[tuple[RunPlan, MethodSpec, int]],
    settings: Settings,
    bar: Progress,
    skipped: Any,
    several: bool,
    workers: int,
    threads: int,
    solo: bool = False,
    runs: int = 0,
) -> dict[Path, RunResult]:
    """Each method of each run scored by one of ``workers`` processes of ``threads`` torch
    threads; a run's records are merged and its files written here once all its methods are in.
    A worker that dies loses only its method's cells (``crashes``; ``solo``: a method alone)."""
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds threads
    # A SimpleQueue's put is in the pipe when it returns (a Queue's is sent a moment later, by
    # a thread): a cell a worker counted done is there to read and keep at a stop.
    events = context.SimpleQueue()
    waiting = {plan.run_dir: sum(1 for t in tasks if t[0] is plan) for plan, _, _ in tasks}
    scored = Scored(list(waiting))
    failed: set[Path] = set()
    results: dict[Path, RunResult] = {}
    n_runs = runs or len(waiting)  # a method scored again alone plans as one of them all
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=start_worker, initargs=(threads, events)
    ) as pool:
        futures: dict[Future, tuple[RunPlan, str]] = {}
        try:  # from the first task: the pool's exit would wait for every task after a stop
            for plan, label, _ in tasks:
                args = (str(plan.run_dir), settings, n_runs, label, bar.disable, bar.total)
                futures[pool.submit(score_task, *args)] = plan, label
            pending = set(futures)
            while pending:
                raise_if_stopped()  # a stop whose exception was lost: the workers go on
                done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                drain(events, bar, scored)
                for future in done:
                    plan, label = futures[future]
                    waiting[plan.run_dir] -= 1
                    if (
                        collect(future, plan, label, scored, failed, skipped, several)
                        and not waiting[plan.run_dir]
                    ):
                        results[plan.run_dir] = skipped.guard(
                            plan.run_dir,
                            lambda plan=plan: write_merged(plan, scored.methods[plan.run_dir]),
                            several,
                        )
            drain(events, bar, scored)
        except BaseException as e:
            running = list((getattr(pool, "_processes", None) or {}).values())  # shutdown drops it
            pool.shutdown(wait=False, cancel_futures=True)
            stop = stop_of(e, running)
            if stop is None and isinstance(e, BrokenProcessPool):
                drain(events, bar, scored)  # the cells the workers sent before one died
                for process in running:
                    process.kill()
                results.update(
                    after_a_crash(
                        tasks,
                        futures,
                        results,
                        scored.of,
                        failed,
                        how_it_ended(running),
                        solo,
                        skipped,
                        several,
                        lambda task: score_in_workers(
                            [task], settings, bar, skipped, several, 1, threads, True, n_runs
                        ),
                    )
                )
                return {run: result for run, result in results.items() if result is not None}
            if stop is None:
                raise
            try:  # Ctrl-C, SIGTERM: keep every cell finished
                drain(events, bar, scored)  # the cells sent before the stop
            finally:
                # The pool's exit would wait for the methods still scoring (the workers ignore
                # Ctrl-C and SIGTERM): end them now, after their cells are read (an end
                # mid-send spoils the queue), with SIGKILL, the one signal they do not ignore.
                for process in running:
                    process.kill()
            plans = {plan.run_dir: plan for plan, _, _ in tasks}
            for run in waiting:
                records = scored.of(run)
                if records and run not in results and run not in failed:
                    keep_before_stop(plans[run], records)
            if stop is e:
                raise
            raise stop from None
    return {run: result for run, result in results.items() if result is not None}


def drain(events: Any, bar: Progress, scored: Scored) -> None:
    """Show what the workers reported so far and keep the cells they finished."""
    with held():  # a stop mid-read would leave half a message in the pipe for the next read
        while not events.empty():
            kind, what = events.get()
            if kind == "tokens":
                bar.update(what)
            else:
                scored.cell(Path(what[0]), Record.from_dict(what[1]))
                bar.cell_done()


def stop_of(error: BaseException, workers: list[Any]) -> KeyboardInterrupt | None:
    """The stop ``error`` is (None for an error): Ctrl-C or SIGTERM here, or a pool broken by
    one (SIGTERM reaches every process of a Slurm job at once; a worker still starting, before
    it ignores it, ends, and this process may see its pool broken before its own stop)."""
    if isinstance(error, KeyboardInterrupt):
        return error
    if not isinstance(error, BrokenProcessPool):
        return None
    ended = [-p.exitcode for p in workers if p.exitcode is not None and p.exitcode < 0]
    return stopped() or next((as_stop(s) for s in ended if s in STOP_SIGNALS), None)


def collect(
    future: Future,
    plan: RunPlan,
    label: MethodSpec,
    scored: Scored,
    failed: set[Path],
    skipped: Any,
    several: bool,
) -> bool:
    """Keep a finished task's records; False once the run has failed (named, the first time, by
    ``skipped``; a single run's error is raised)."""
    error = future.exception()
    if error is not None and not (isinstance(error, PosexpError) and several):
        raise error
    if plan.run_dir in failed:
        return False
    if error is not None:
        failed.add(plan.run_dir)
        skipped.skip(plan.run_dir, str(error))
        return False
    scored.method(plan.run_dir, label, [Record.from_dict(r) for r in future.result()])
    return True


# ---- in a worker process ------------------------------------------------------------------

_events: Any = None


def start_worker(threads: int, events: Any) -> None:
    """A worker's set-up: its torch threads, the queue it reports progress on, and stops."""
    global _events
    torch.set_num_threads(threads)
    _events = events
    # Ctrl-C reaches every process of the terminal's group, SIGTERM every process of a Slurm
    # job (at its time limit) or of a group (kill -TERM -PGID). The main process reads the
    # cells the workers sent, then ends them and keeps those cells: a worker that ended at the
    # signal could take cells it had not sent yet with it, and end before the main process saw
    # the signal (it then found a broken pool and kept nothing).
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    # Nor does a worker outlive the main process: killed (SIGKILL, out of memory), that cannot
    # end its workers, which would finish their task, then wait for the next one for ever.
    threading.Thread(target=end_with_main, daemon=True).start()
    # The main process planned every run first and said what planning warns of; a worker plans
    # its run again and would say it again, once per method.
    logging.getLogger("posexp").setLevel(logging.ERROR)
    # torch's compiler shows a tqdm bar here, and tqdm's own lock is a named semaphore, which a
    # worker ended at a stop leaves behind: "resource_tracker: ... leaked semaphore objects"
    # under the stop's one line. No other process shares a worker's bars.
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def end_with_main() -> None:
    """End this worker as soon as the process that started it is gone."""
    multiprocessing.parent_process().join()
    os._exit(1)


def score_task(
    run_dir: str, settings: Settings, n_runs: int, label: MethodSpec, disable: bool, total: int
) -> list[dict[str, Any]]:
    """Plan one run again (this process holds nothing of the main one), cut and score the cells
    of one method still to score; their records, as plain data."""
    from posexp.commands.extrapolate.plan import attach_work, plan_run
    from posexp.runtime.device import resolve_device
    from posexp.store.rundir import RunDir

    run = RunDir(Path(run_dir)).share("--run")
    try:
        plan = plan_run(run, settings, n_runs)
        test = (
            load_test_tokens(plan.cfg, {}, plan.run.tokenizer_file)
            if needs_test_split(plan)
            else None
        )
        attach_work(
            plan, None if test is None else len(test), None if test is None else test.starts
        )
        items = [item for item in plan.todo if item.record.spec == label]
        device = resolve_device(settings.device)
        records: list[Record] = []
        progress = QueueProgress(_events, disable, total, run_dir, records)
        score_cells(plan, items, test, device, settings.batch_tokens, progress, into=records)
        return [r.to_dict() for r in records]
    finally:
        run.unlock()
