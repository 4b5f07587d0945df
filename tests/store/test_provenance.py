"""provenance.json sessions: which Slurm job (and which restart of it) ran each one."""

from __future__ import annotations

import json

from posexp.store import provenance


def test_a_session_outside_a_scheduler_names_none(monkeypatch):
    for var in provenance.SLURM_FACTS.values():
        monkeypatch.delenv(var, raising=False)
    assert provenance.scheduler() is None
    assert provenance.session()["scheduler"] is None


def test_a_slurm_session_records_its_job_array_task_and_restart(monkeypatch):
    for var in provenance.SLURM_FACTS.values():
        monkeypatch.delenv(var, raising=False)
    env = {
        "SLURM_JOB_ID": "71",
        "SLURM_ARRAY_JOB_ID": "70",
        "SLURM_ARRAY_TASK_ID": "1",
        "SLURM_JOB_PARTITION": "local",
        "SLURMD_NODENAME": "node7",
    }
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    first = provenance.scheduler()
    # Slurm sets SLURM_RESTART_COUNT only once a job has been requeued: absent means 0.
    assert first == {
        "name": "slurm",
        "job_id": "71",
        "array_job_id": "70",
        "array_task_id": "1",
        "restart_count": "0",
        "partition": "local",
        "node": "node7",
    }
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert provenance.scheduler() == {**first, "restart_count": "2"}


def test_a_session_left_running_is_marked_died_when_the_next_starts(tmp_path):
    # The first session was SIGKILLed: it never stamped its end. The next one (which owns the
    # dir) says so instead of leaving a second session "running" beside its own.
    provenance.start(tmp_path, precision="fp32")
    provenance.start(tmp_path, precision="fp32")
    provenance.finish(tmp_path, "completed")
    sessions = json.loads((tmp_path / provenance.FILE).read_text())["sessions"]
    assert [s["status"] for s in sessions] == [provenance.DIED, "completed"]
    assert sessions[0]["ended"] is None  # when it died is not known


def test_a_recorded_end_is_kept_when_the_next_session_starts(tmp_path):
    provenance.start(tmp_path)
    provenance.finish(tmp_path, "interrupted")
    provenance.start(tmp_path)
    sessions = json.loads((tmp_path / provenance.FILE).read_text())["sessions"]
    assert [s["status"] for s in sessions] == ["interrupted", "running"]
