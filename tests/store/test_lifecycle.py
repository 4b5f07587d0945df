"""A run dir's lifecycle: claimed by one process (the CLI paths are in test_train_cli.py)."""

from __future__ import annotations

import json
import logging
import os
import time

from posexp.store.lifecycle import claim_run_dir, discard_interrupted, record_failure
from posexp.store.rundir import RunDir
from tests.store.test_rundir import make_run


def test_a_run_dir_taken_in_the_same_second_moves_the_run_and_its_log(tmp_path):
    shared = tmp_path / "2026-11-30_07-00-00_kjv_rope_h4"
    (shared / ".hydra").mkdir(parents=True)
    (shared / ".hydra" / "overrides.yaml").write_text("- pe=rope\n")
    assert claim_run_dir(shared) == shared  # the first run keeps Hydra's dir
    handler = logging.FileHandler(shared / "train.log")
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        moved = claim_run_dir(shared)  # the second run, same second, same overrides
        assert moved == tmp_path / f"{shared.name}-2"
        assert (moved / ".hydra" / "overrides.yaml").read_text() == "- pe=rope\n"
        logging.getLogger("posexp").warning("a line of the second run")
    finally:
        for h in [
            h
            for h in root.handlers
            if isinstance(h, logging.FileHandler) and str(tmp_path) in h.baseFilename
        ]:
            root.removeHandler(h)
            h.close()
    assert "a line of the second run" in (moved / "train.log").read_text()
    assert "a line of the second run" not in (shared / "train.log").read_text()


def test_a_dir_of_an_older_run_is_not_blamed_on_the_same_second(tmp_path, caplog):
    old = tmp_path / "run"
    assert claim_run_dir(old) == old
    RunDir(old).unlock()  # that run ended 36 minutes ago
    os.utime(old / ".owner", (time.time() - 36 * 60,) * 2)
    with caplog.at_level(logging.WARNING, logger="posexp"):
        moved = claim_run_dir(old)
    RunDir(moved).unlock()
    assert moved == tmp_path / "run-2"
    assert f"{old} belongs to a run started 36m ago; this run uses {moved}" in caplog.text
    assert "same second" not in caplog.text


def test_ctrl_c_removes_a_new_run_without_a_checkpoint_but_never_a_resumable_one(tmp_path):
    fresh = tmp_path / "fresh"
    (fresh / ".hydra").mkdir(parents=True)
    discard_interrupted(fresh)
    assert not fresh.exists()
    make_run(tmp_path / "kept")
    discard_interrupted(tmp_path / "kept")
    assert RunDir(tmp_path / "kept").has_checkpoint()


def test_a_run_dir_is_removed_even_when_a_writer_thread_puts_a_file_back(tmp_path, monkeypatch):
    # TensorBoard's writer thread flushing between rmtree's unlinks and its rmdir: the event
    # file comes back, rmdir fails, and ignore_errors used to leave the dir silently.
    import shutil

    from posexp.store import lifecycle

    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.1").write_bytes(b"x")
    real, calls = shutil.rmtree, []

    def rmtree_with_a_flush_in_between(path, ignore_errors=False):
        calls.append(path)
        real(path, ignore_errors=ignore_errors)
        if len(calls) == 1:  # the flush lands after the removal: the file and its dir are back
            run.mkdir()
            (run / "events.out.tfevents.1").write_bytes(b"late")

    monkeypatch.setattr(lifecycle.shutil, "rmtree", rmtree_with_a_flush_in_between)
    lifecycle.remove_run_dir(run)
    assert not run.exists() and len(calls) == 2


def test_an_unexpected_error_is_recorded_with_its_type_and_logged(tmp_path, caplog):
    record_failure(tmp_path, ValueError("dropout probability has to be between 0 and 1\nmore"))
    assert json.loads((tmp_path / "results.json").read_text()) == {
        "status": "failed",
        "error": "ValueError: dropout probability has to be between 0 and 1",
    }
    assert "job failed" in caplog.text
