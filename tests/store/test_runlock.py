"""One writer per run dir: the lock every writing command holds (CLI paths in the command tests)."""

from __future__ import annotations

import os
import platform

import pytest

from posexp.errors import PosexpError
from posexp.store.rundir import RunDir
from tests.helpers import lock_held_elsewhere


def test_a_second_process_is_refused_in_one_line_naming_the_holder(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    with lock_held_elsewhere(run.path) as other:
        holder = f"{other.pid}@{platform.node()}"
        assert run.holder() == holder
        with pytest.raises(
            PosexpError,
            match=rf"^resume='.*run' is being written by another posexp "
            rf"process \({holder}\); wait for it to end",
        ):
            run.lock("resume=")
        with pytest.raises(PosexpError, match=rf"\({holder}\)"):
            run.check_free()
        assert (run.path / ".owner").read_text().strip() == holder  # the refused one wrote nothing
    assert run.holder() is None
    with run.writing():  # free again once the holder has ended
        assert (run.path / ".owner").read_text().strip() == f"{os.getpid()}@{platform.node()}"


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    run = RunDir(tmp_path)
    with lock_held_elsewhere(tmp_path) as other:
        other.kill()  # SIGKILL: no clean-up runs, the kernel drops the lock
        other.wait()
        run.lock()
        run.unlock()


def test_one_process_reenters_its_own_lock(tmp_path):
    run = RunDir(tmp_path)
    run.lock()
    run.lock("report folder")  # report, then the evaluation it runs on the same dir
    assert run.holder() is None  # not "another process"
    run.unlock()
    with pytest.raises(AssertionError), lock_held_elsewhere(tmp_path):
        pass  # still held here: the other process cannot take it (it never says "locked")
    run.unlock()
    with lock_held_elsewhere(tmp_path):
        with pytest.raises(PosexpError, match="being written by another posexp process"):
            run.lock()


def test_a_claimed_dir_is_never_claimed_again_even_after_its_run_ended(tmp_path):
    first = RunDir(tmp_path / "2026-11-30_07-00-00_kjv_rope_h4").claim()
    first.unlock()  # that run ended
    second = RunDir(first.path).claim()
    assert second.path == first.path.with_name(f"{first.path.name}-2")
    second.unlock()
