"""eval-extrapolate and report write into run dirs: never into one another process is writing."""

from __future__ import annotations

import platform

import pytest

from posexp.commands.report.write import write_report
from posexp.errors import PosexpError
from tests.helpers import lock_held_elsewhere, posexp, snapshot
from tests.store.test_rundir import make_run

FAST = ["--lengths", "32", "--method", "none", "--tokens", "64", "--device", "cpu"]


def test_eval_extrapolate_leaves_a_run_still_training_alone(tmp_path, cache):
    sweep = tmp_path / "sweep"
    make_run(sweep / "a")
    make_run(sweep / "b")
    with lock_held_elsewhere(sweep / "a") as other:  # a is still training
        busy = snapshot(sweep / "a")
        holder = f"{other.pid}@{platform.node()}"
        proc = posexp(tmp_path, cache, "eval-extrapolate", "--run", str(sweep), *FAST, check=False)
        # The other run is evaluated; the exit status says that one was not.
        assert proc.returncode == 2
        assert proc.stderr.splitlines()[-1] == (
            "error: evaluated 1 run(s); skipped 1 (each named above with its reason)"
        )
        assert (
            f"{sweep / 'a'}: skipped: --run '{sweep / 'a'}' is being written by another "
            f"posexp process ({holder})" in proc.stdout
        )
        assert (sweep / "b" / "eval" / "extrapolate.json").is_file()  # the sweep's other run
        alone = posexp(
            tmp_path, cache, "eval-extrapolate", "--run", str(sweep / "a"), *FAST, check=False
        )
        assert alone.returncode == 2 and len(alone.stderr.splitlines()) == 1
        assert alone.stderr.startswith(
            f"error: --run '{sweep / 'a'}' is being written by another posexp process ({holder})"
        )
        assert snapshot(sweep / "a") == busy  # no eval/, no extrapolate/ events


def test_report_refuses_a_run_dir_another_process_is_writing(tmp_path):
    run = tmp_path / "run"
    make_run(run, results={"status": "completed", "step": 3})
    with lock_held_elsewhere(run) as other:
        with pytest.raises(
            PosexpError,
            match=rf"^report folder '.*run' is being written by "
            rf"another posexp process \({other.pid}@",
        ):
            write_report(run, evaluate=False)
    assert not (run / "report.md").exists()
    write_report(run, evaluate=False)  # once that process has ended
    assert (run / "report.md").is_file()


def test_evaluations_of_one_run_run_side_by_side_and_keep_a_trainer_out(tmp_path, cache):
    import subprocess
    import sys

    from posexp.store import runlock

    run = tmp_path / "run"
    make_run(run, results={"status": "completed", "step": 3})
    other = subprocess.Popen(  # another evaluation of the run, holding it shared
        [
            sys.executable,
            "-c",
            "import sys; from posexp.store import runlock; runlock.share(sys.argv[1]); "
            "print('shared', flush=True); sys.stdin.read()",
            str(run),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline().strip() == "shared"
        posexp(tmp_path, cache, "eval-extrapolate", "--run", str(run), *FAST)  # not refused
        assert (run / "eval" / "extrapolate.json").is_file()
        with pytest.raises(PosexpError, match=r"is being written by another posexp process"):
            runlock.lock(run, "resume=")  # what a training run takes: refused meanwhile
    finally:
        other.stdin.close()
        other.wait(timeout=60)
