"""A worker that dies while scoring loses only its method's cells (posexp/commands/extrapolate/
crashes.py): the finished cells kept, the other methods scored again alone, the lost one named."""

from __future__ import annotations

import signal
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import SimpleNamespace

import pytest

from posexp.commands.extrapolate import crashes
from posexp.errors import PosexpError


def future(result=None, error=None):
    f = Future()
    f.set_exception(error) if error is not None else f.set_result(result)
    return f


class Skipped:
    def __init__(self):
        self.said = []

    def skip(self, path, reason):
        self.said.append((path, reason))


@pytest.fixture
def two_runs(monkeypatch):
    """Run a with methods none (done) and pi (its worker died), run b with yarn (broken with
    it, innocent); the merges written, by run."""
    a, b = SimpleNamespace(run_dir=Path("a")), SimpleNamespace(run_dir=Path("b"))
    tasks = [(a, "none", 3), (a, "pi", 2), (b, "yarn", 1)]
    futures = {
        future([{}]): (a, "none"),
        future(error=BrokenProcessPool("a child process terminated abruptly")): (a, "pi"),
        future(error=BrokenProcessPool("a child process terminated abruptly")): (b, "yarn"),
    }
    written = {}
    monkeypatch.setattr(
        crashes, "write_merged", lambda plan, records: written.setdefault(plan.run_dir, records)
    )
    return tasks, futures, written


def test_the_methods_left_are_scored_again_alone_and_the_cells_finished_kept(two_runs, capsys):
    tasks, futures, written = two_runs
    alone = []
    out = crashes.after_a_crash(
        tasks,
        futures,
        {},
        lambda run: [f"{run} cell"],
        set(),
        "killed by SIGBUS",
        False,
        Skipped(),
        True,
        lambda task: alone.append(task[1]) or {task[0].run_dir: task[1]},
    )
    assert alone == ["pi", "yarn"]  # not the finished method
    assert written == {Path("a"): ["a cell"], Path("b"): ["b cell"]}
    assert out == {Path("a"): "pi", Path("b"): "yarn"}
    err = capsys.readouterr().err  # the crash is said, though nothing was lost
    assert err == (
        "a worker process ended (killed by SIGBUS); the cells finished are kept, and the 2 "
        "method(s) left are scored again one at a time\n"
    )


def test_a_method_that_kills_its_worker_alone_is_named_in_one_line(two_runs):
    tasks, futures, written = two_runs
    solo = [(p, label, n) for p, label, n in tasks if label == "pi"]
    lost = {f: t for f, t in futures.items() if t[1] == "pi"}
    skipped, failed = Skipped(), set()
    out = crashes.after_a_crash(
        solo,
        lost,
        {},
        lambda run: [],
        failed,
        "killed by SIGBUS",
        True,
        skipped,
        True,
        lambda task: pytest.fail("scored again"),
    )
    assert out == {} and failed == {Path("a")}
    [(run, reason)] = skipped.said
    assert run == Path("a") and "method pi ended (killed by SIGBUS)" in reason
    assert "\n" not in reason
    with pytest.raises(PosexpError, match=r"^a: the worker process scoring method pi ended"):
        crashes.after_a_crash(
            solo, lost, {}, lambda run: [], set(), "exit status 1", True, skipped, False, None
        )


def test_how_a_worker_ended_is_said_in_words():
    ended = [SimpleNamespace(exitcode=c) for c in (0, None, -signal.SIGBUS, 3, -signal.SIGBUS)]
    assert crashes.how_it_ended(ended) == "killed by SIGBUS, exit status 3"
    assert crashes.how_it_ended([]) == "ended without a word"
