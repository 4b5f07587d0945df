"""`posexp runs` and the report's job reading: messages that say what is actually there."""

from __future__ import annotations

import json

import pytest
import yaml

from posexp.commands.report.jobs import find_jobs
from posexp.commands.runs import list_runs
from posexp.errors import PosexpError
from posexp.store.rundir import RunDir


def failed_job(path):
    """A sweep job that failed on its config: Hydra's record (with interpolations) and results."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump(
            {"heads": 4, "model": {"name": "tiny", "n_heads": "${heads}"}, "pe": {"name": "alibi"}}
        )
    )
    (path / "results.json").write_text(json.dumps({"status": "failed", "error": "bad"}))


def test_a_file_is_called_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(
        PosexpError,
        match=r"^runs: '.*notes.txt' is a file, not a folder; pass a "
        r"run dir or a folder of runs",
    ):
        list_runs(tmp_path / "notes.txt")


def test_errors_name_no_other_command(tmp_path):
    # `posexp runs` on a folder without runs said "report: no runs in ..."; it now lists none
    # (scripts read `[]`), and the report's own search still names the folder.
    assert list_runs(tmp_path) == []
    with pytest.raises(PosexpError, match=r"^no runs in '.*'"):
        find_jobs(tmp_path)


def test_a_folder_inside_a_run_names_the_run(tmp_path):
    failed_job(tmp_path / "run")
    (tmp_path / "run" / "checkpoint").mkdir()
    with pytest.raises(
        PosexpError,
        match=r"^runs: '.*run/checkpoint' is a folder inside the run dir '.*run'; pass that$",
    ):
        list_runs(tmp_path / "run" / "checkpoint")


def test_a_cut_results_json_is_unreadable_not_missing(tmp_path):
    job = tmp_path / "job"
    failed_job(job)
    (job / "results.json").write_text('{"status": "comple')  # cut short
    run = RunDir(job)
    assert run.results() is None and run.status() == "unreadable"
    assert run.results_problem().startswith(f"{str(job / 'results.json')!r} is unreadable (")
    (row,) = list_runs(tmp_path)
    assert row["status"] == "unreadable"
    (found,) = find_jobs(tmp_path)
    assert "is unreadable" in found.error and "no results.json" not in found.error


def test_a_failed_jobs_hydra_record_is_read_with_its_interpolations_resolved(tmp_path):
    job = tmp_path / "job"
    failed_job(job)
    assert RunDir(job).saved_config()["model"]["n_heads"] == 4  # was the text "${heads}"
    (row,) = list_runs(tmp_path)
    assert row["status"] == "failed"
