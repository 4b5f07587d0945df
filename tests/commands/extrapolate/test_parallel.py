"""Scoring a sweep's runs in worker processes: the same records as one after another."""

from __future__ import annotations

import json
import shutil
import signal

import pytest
import torch

from posexp.commands.extrapolate import parallel
from posexp.commands.extrapolate.evaluate import evaluate_runs
from posexp.commands.extrapolate.plan import Settings
from posexp.config import ExtrapolateConfig
from posexp.extension.spec import parse_specs
from tests.helpers import TINY, posexp, posexp_in_own_group


def test_workers_for_several_runs_on_the_cpu_one_thread_per_core(monkeypatch):
    monkeypatch.setattr(parallel, "usable_cores", lambda: 8)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert parallel.worker_plan(Settings(), cpu, runs=3, tasks=12) == (8, 1)
    assert parallel.worker_plan(Settings(), cpu, runs=2, tasks=3) == (3, 2)  # 3 x 2 <= 8 cores
    assert parallel.worker_plan(Settings(workers=2), cpu, runs=5, tasks=9) == (2, 4)
    assert parallel.worker_plan(Settings(workers=2, threads=1), cpu, 5, 9) == (2, 1)
    # One run scores here unless workers are asked for; a GPU scores here; so does one task.
    assert parallel.worker_plan(Settings(threads=3), cpu, runs=1, tasks=9) == (1, 3)
    assert parallel.worker_plan(Settings(workers=4), cpu, runs=1, tasks=9) == (4, 2)
    assert parallel.worker_plan(Settings(threads=3), cuda, runs=4, tasks=9)[0] == 1
    assert parallel.worker_plan(Settings(threads=3), cpu, runs=4, tasks=1)[0] == 1


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, cache):
    cwd = tmp_path_factory.mktemp("parallel")
    posexp(cwd, cache, "train", "-m", "pe=rope,alibi", *TINY, "hydra.sweep.dir=sweep")
    return cwd / "sweep"


def test_workers_give_the_records_one_process_gives(two_runs, tmp_path):
    apart = tmp_path / "apart"
    shutil.copytree(two_runs, apart)
    knobs = ExtrapolateConfig(lengths=[32, 64], tokens=256, method=parse_specs("none,pi,logn"))
    evaluate_runs(two_runs, Settings(knobs, device="cpu", workers=1, threads=1), progress=False)
    evaluate_runs(apart, Settings(knobs, device="cpu", workers=2, threads=1), progress=False)
    for job in ("pe=rope", "pe=alibi"):
        here = json.loads((two_runs / job / "eval" / "extrapolate.json").read_text())
        there = json.loads((apart / job / "eval" / "extrapolate.json").read_text())
        assert [(r["label"], r["length"]) for r in there] == [
            (r["label"], r["length"]) for r in here
        ]
        for a, b in zip(here, there, strict=True):
            assert b["ppl"] == pytest.approx(a["ppl"], rel=1e-6)
    methods = {
        r["label"] for r in json.loads((apart / "pe=alibi/eval/extrapolate.json").read_text())
    }
    assert methods == {"none", "logn"}  # pi does not apply to ALiBi


def kept_cells(run) -> set[tuple[str, int]]:
    """(method, length) of every record kept in ``run``'s eval dir (none without one)."""
    path = run / "eval" / "extrapolate.json"
    records = json.loads(path.read_text()) if path.exists() else []
    return {(r["label"], r["length"]) for r in records}


def said_kept(run, kept: int, todo: int) -> str:
    """The line a stop prints for a run that kept ``kept`` of its ``todo`` cells."""
    rest = (
        f"rerun the command to score the other {todo - kept}"
        if kept < todo
        else "none is left to score"
    )
    return f"{run}: kept the {kept} cell(s) scored before the stop; {rest}"


TODO = {"pe=rope": 6, "pe=alibi": 4}  # 2 lengths x 3 methods; pi does not apply to ALiBi
KNOBS = ExtrapolateConfig(lengths=[32, 64], tokens=256, method=parse_specs("none,pi,logn"))


def test_a_stop_keeps_the_methods_workers_finished(two_runs, tmp_path, monkeypatch, capsys):
    # Ctrl-C or SIGTERM once the first method is in: its cells are kept, the rest rescored later.
    apart = tmp_path / "apart"
    shutil.copytree(two_runs, apart, ignore=shutil.ignore_patterns("eval"))
    real, finished = parallel.collect, []

    def collect_then_stop(future, plan, label, *args):
        real(future, plan, label, *args)
        finished.append((plan.run_dir, label))
        raise KeyboardInterrupt

    monkeypatch.setattr(parallel, "collect", collect_then_stop)
    with pytest.raises(KeyboardInterrupt):
        evaluate_runs(apart, Settings(KNOBS, device="cpu", workers=2, threads=1), progress=False)
    ((stopped, label),) = finished
    assert {(label.label, 32), (label.label, 64)} <= kept_cells(stopped)  # the whole method
    err = capsys.readouterr().err
    for run in (apart / "pe=rope", apart / "pe=alibi"):
        kept = len(kept_cells(run))  # with the cells other workers had sent
        assert kept == 0 or said_kept(run, kept, TODO[run.name]) in err


def test_a_stop_keeps_every_cell_workers_finished(two_runs, tmp_path, monkeypatch, capsys):
    # A stop as the first cell of a method reaches this process (its worker still scoring the
    # method): that cell, and every other one the workers had sent, is kept, as scoring in one
    # process keeps them; a second evaluation scores only the others.
    apart = tmp_path / "apart"
    shutil.copytree(two_runs, apart, ignore=shutil.ignore_patterns("eval"))
    real, counted = parallel.Progress.cell_done, []

    def count_then_stop(bar):
        real(bar)
        counted.append(1)
        if len(counted) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(parallel.Progress, "cell_done", count_then_stop)
    settings = Settings(KNOBS, device="cpu", workers=2, threads=1)
    with pytest.raises(KeyboardInterrupt):
        evaluate_runs(apart, settings, progress=False)
    runs = [apart / "pe=rope", apart / "pe=alibi"]
    kept = {run: len(kept_cells(run)) for run in runs}
    assert sum(kept.values()) == len(counted) >= 1  # every cell counted done, none other
    err = capsys.readouterr().err
    for run in runs:
        assert kept[run] == 0 or said_kept(run, kept[run], TODO[run.name]) in err
    monkeypatch.undo()
    evaluate_runs(apart, settings, progress=False, tables=False)
    out = capsys.readouterr().out
    for run in runs:
        todo = TODO[run.name]
        assert (
            f"{kept[run]} of {todo} cells already measured, scoring {todo - kept[run]}"
            if kept[run]
            else f"scoring {todo} cells"
        ) in out
        assert len(kept_cells(run)) == todo


# SIGTERM to every process of the group (a Slurm time limit, kill -TERM -PGID) once a worker
# has finished a method, sent from where this process cannot raise its stop: a weakref callback
# (as when it lands in the module-lock callback of an import). Its handler still runs there.
GROUP_SIGTERM_LOST_HERE = """
import os, signal, sys, weakref
from posexp.cli.app import main
from posexp.commands.extrapolate import parallel

class Gone:
    pass

def collect_then_stop(*args, real=parallel.collect, sent=[]):
    kept = real(*args)
    if not sent:
        sent.append(1)
        gone = Gone()
        ref = weakref.ref(gone, lambda _: os.killpg(0, signal.SIGTERM))
        del gone
    return kept

parallel.collect = collect_then_stop
sys.argv = ["posexp", "eval-extrapolate", *sys.argv[1:]]
main()
"""


def test_sigterm_to_the_whole_group_keeps_the_cells_and_leaves_no_worker(two_runs, tmp_path, cache):
    # The workers died at the signal; the stop's exception was lost here ("Exception ignored"),
    # so this process found its pool broken: a BrokenProcessPool traceback, exit 1, the cells
    # of the method a worker had finished lost. The workers now ignore SIGTERM until this
    # process has read their cells, and a stop whose exception was lost still stops it.
    apart = tmp_path / "apart"
    shutil.copytree(two_runs, apart, ignore=shutil.ignore_patterns("eval"))
    args = ["--run", str(apart), "--lengths", "32,64", "--tokens", "256", "--workers", "2"]
    args += ["--method", "none,pi,logn"]
    # Returns once every process of the command has ended: no worker is left.
    proc = posexp_in_own_group(tmp_path, cache, GROUP_SIGTERM_LOST_HERE, *args, "--threads", "1")
    assert proc.returncode == 143, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[-1] == "stopped (SIGTERM)"
    assert not [line for line in lines if "Traceback" in line or "Exception ignored" in line]
    runs = [apart / "pe=rope", apart / "pe=alibi"]
    kept = {run: len(kept_cells(run)) for run in runs}
    assert sum(kept.values()) >= 2  # the method finished at the signal: both its lengths
    for run in runs:
        assert kept[run] == 0 or said_kept(run, kept[run], TODO[run.name]) in proc.stderr
    # That a second evaluation scores only the rest: test_a_stop_keeps_every_cell_workers_finished.


# The main process killed outright (SIGKILL, the out-of-memory killer) as a worker finishes
# its first cell: nothing can end its workers.
MAIN_KILLED_AT_THE_FIRST_CELL = """
import os, signal, sys
from posexp.cli.app import main
from posexp.commands.extrapolate import parallel

def killed(bar, real=parallel.Progress.cell_done):
    real(bar)
    os.kill(os.getpid(), signal.SIGKILL)

parallel.Progress.cell_done = killed
sys.argv = ["posexp", "eval-extrapolate", *sys.argv[1:]]
main()
"""


def test_no_worker_outlives_the_main_process_killed_outright(two_runs, tmp_path, cache):
    # The workers, which ignore Ctrl-C and SIGTERM, finished their task, then waited for the
    # next one for ever (with the resource tracker): now each ends as its parent does.
    apart = tmp_path / "apart"
    shutil.copytree(two_runs, apart, ignore=shutil.ignore_patterns("eval"))
    args = ["--run", str(apart), "--lengths", "32,64", "--tokens", "256", "--workers", "2"]
    proc = posexp_in_own_group(
        tmp_path, cache, MAIN_KILLED_AT_THE_FIRST_CELL, *args, "--threads", "1", timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr  # and every worker has ended


# SIGTERM as this process first imports matplotlib, to plot the run whose cells it has scored.
STOPPED_IN_AN_IMPORT = """
import os, signal, sys
from posexp.cli.app import main

class StopInMatplotlib:
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib.cm":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)

sys.meta_path.insert(0, StopInMatplotlib())
sys.argv = ["posexp", "eval-extrapolate", *sys.argv[1:]]
main()
"""


def test_a_stop_while_a_run_is_written_comes_once_its_files_are(two_runs, tmp_path, cache):
    # The stop cut the write short: every cell scored was lost, with nothing said (in workers,
    # matplotlib was left half imported, and the write of the other runs' cells failed on it).
    run = tmp_path / "pe=rope"
    shutil.copytree(two_runs / "pe=rope", run, ignore=shutil.ignore_patterns("eval"))
    args = ["--run", str(run), "--lengths", "32,64", "--tokens", "256", "--method", "none,pi"]
    proc = posexp_in_own_group(tmp_path, cache, STOPPED_IN_AN_IMPORT, *args)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.splitlines()[-2:] == [said_kept(run, 4, 4), "stopped (SIGTERM)"]
    assert kept_cells(run) == {(m, n) for m in ("none", "pi") for n in (32, 64)}
    assert (run / "eval" / "extrapolate.png").is_file()


# Ctrl-C as the first cell a worker finished reaches this process, and its echo to the whole
# group as the cells are kept (`timeout -s INT` signals the process, then its group).
INTERRUPT_ECHOED = """
import os, signal, sys
from posexp.cli.app import main
from posexp.commands.extrapolate import parallel

def stop(bar, real=parallel.Progress.cell_done):
    real(bar)
    if bar.done == 1:
        os.kill(os.getpid(), signal.SIGINT)

def echo_then_keep(*args, real=parallel.keep_before_stop):
    os.killpg(0, signal.SIGINT)
    real(*args)

parallel.Progress.cell_done = stop
parallel.keep_before_stop = echo_then_keep
sys.argv = ["posexp", "eval-extrapolate", *sys.argv[1:]]
main()
"""


def test_a_stop_echoed_to_the_group_is_one_stop(two_runs, tmp_path, cache):
    # The echo was a second Ctrl-C: it cut the keeping short, and the cells were lost.
    apart = tmp_path / "apart"
    shutil.copytree(two_runs, apart, ignore=shutil.ignore_patterns("eval"))
    args = ["--run", str(apart), "--lengths", "32,64", "--tokens", "256", "--workers", "2"]
    args += ["--method", "none,pi,logn", "--threads", "1"]
    proc = posexp_in_own_group(tmp_path, cache, INTERRUPT_ECHOED, *args)
    assert proc.returncode == 130, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[-1] == "interrupted"
    # Nor the resource tracker's warning of the named semaphores the ended workers had made
    # (tqdm's lock, for torch's compiler) as "leaked".
    unwanted = ("Traceback", "Exception ignored", "leaked")
    assert not [line for line in lines if any(word in line for word in unwanted)]
    kept = {run: len(kept_cells(run)) for run in (apart / "pe=rope", apart / "pe=alibi")}
    assert sum(kept.values()) >= 1
    for run, n in kept.items():
        assert n == 0 or said_kept(run, n, TODO[run.name]) in proc.stderr


def test_a_pool_broken_by_a_stop_is_that_stop():
    # SIGTERM reaches every process of a Slurm job at once: a worker still starting (it ignores
    # SIGTERM only once started) ends, and this process may find its pool broken before its own
    # stop is raised, or after it was lost. That is the stop (the cells read are kept), not an
    # error with a traceback.
    from concurrent.futures.process import BrokenProcessPool
    from types import SimpleNamespace

    from posexp import stops

    def ended(code):
        return SimpleNamespace(exitcode=code)

    broken = BrokenProcessPool("A process in the process pool was terminated abruptly")
    assert isinstance(parallel.stop_of(broken, [ended(None), ended(-15)]), stops.Terminated)
    assert type(parallel.stop_of(broken, [ended(-2)])) is KeyboardInterrupt
    assert parallel.stop_of(broken, [ended(-9), ended(None)]) is None  # killed: an error
    assert parallel.stop_of(ValueError("x"), [ended(-15)]) is None
    interrupt = KeyboardInterrupt()
    assert parallel.stop_of(interrupt, []) is interrupt
    with stops.stops_as_interrupt():
        with pytest.raises(stops.Terminated):  # where Python cannot raise it, it is lost
            stops.stop_on_signal(signal.SIGTERM, None)
        assert isinstance(parallel.stop_of(broken, [ended(-9)]), stops.Terminated)
    assert parallel.stop_of(broken, [ended(-9)]) is None  # a later command starts afresh


def test_largest_tasks_go_first():
    class Item:
        def __init__(self, method, size):
            self.record, self.size = type("R", (), {"spec": method})(), size

    plan = type("P", (), {"todo": [Item("a", 1), Item("b", 5), Item("a", 2)]})()
    assert [(label, size) for _, label, size in parallel.method_tasks([plan])] == [
        ("b", 5),
        ("a", 3),
    ]


def fake_plans(runs: int, methods: list[str], lengths: list[int]) -> list:
    """Plans with only what the bar reads: each run's cells still to score."""
    from types import SimpleNamespace

    from posexp.extension.spec import MethodSpec
    from posexp.scoring.records import Record

    return [
        SimpleNamespace(
            todo=[
                SimpleNamespace(record=Record(MethodSpec(m), n, "nonoverlap", 1.0), size=n * 100)
                for m in methods
                for n in lengths
            ]
        )
        for _ in range(runs)
    ]


def test_the_bar_says_it_counts_the_tokens_of_every_cell_together(capsys):
    plans = fake_plans(1, ["none", "yarn"], [64, 128, 256])
    assert parallel.scoring_text(plans) == "scoring 3 lengths × 2 methods"
    assert parallel.scoring_text(fake_plans(4, ["none"], [64, 128])) == (
        "scoring 4 runs × 2 lengths × 1 method"
    )
    # Cells already measured are not scored again: the count says how many are left.
    partial = fake_plans(1, ["none", "yarn"], [64, 128, 256])
    partial[0].todo.pop()
    assert parallel.scoring_text(partial) == "scoring 5 cells (3 lengths, 2 methods)"
    tokens = sum(item.size for item in plans[0].todo)
    bar = parallel.Progress(tokens, 6, show=True, desc=parallel.scoring_text(plans))
    bar.update(1234)
    bar.cell_done()
    text = str(bar.bar)
    bar.close()
    assert text.startswith("scoring 3 lengths × 2 methods:")
    from tqdm import tqdm

    assert f"1.23k/{tqdm.format_sizeof(tokens)} tokens" in text and "1/6 cells done" in text
    assert bar.summary() == f"in all 1/6 cells done, 1,234/{tokens:,} tokens"
