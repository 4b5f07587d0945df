"""A sweep's jobs are checked before the sweep starts: a refused job is one line naming it, and
nothing is written; a preset's sweep is expanded as Hydra's basic sweeper runs it."""

from __future__ import annotations

import pytest

from posexp.cli.sweep_check import check_sweep_jobs
from posexp.commands.train import check_config
from posexp.config.run import from_composed
from posexp.errors import PosexpError
from tests.helpers import TINY, posexp


def build(cfg, overrides):
    return check_config(from_composed(cfg))


def test_a_refused_job_stops_the_sweep_before_anything_is_written(tmp_path, cache):
    out = posexp(tmp_path, cache, "train", "-m", *TINY, "pe=rope,alibi", "heads=2,3", check=False)
    assert out.returncode == 2
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert (
        line.startswith("error: 2 of 4 sweep jobs refused, e.g. job ") and "pe=rope heads=3" in line
    )
    assert "heads=3 does not divide d_model=64" in line and "Traceback" not in out.stderr
    assert line.endswith("record these as failed with POSEXP_SWEEP_CHECK=0")
    assert not (tmp_path / "outputs").exists()


def test_a_presets_sweep_is_expanded_and_the_command_line_wins():
    assert check_sweep_jobs(["-m", "experiment=extrapolation"], "train", build) == 33
    assert check_sweep_jobs(["-m", "experiment=extrapolation", "seed=0"], "train", build) == 11
    assert check_sweep_jobs(["-m", "pe=rope,alibi", "seed=range(3)"], "train", build) == 6
    assert check_sweep_jobs(["pe=rope"], "train", build) == 0  # not a sweep


def test_the_check_can_be_left_to_the_jobs(monkeypatch):
    monkeypatch.setenv("POSEXP_SWEEP_CHECK", "0")  # a grid some of whose jobs are known to fail
    assert check_sweep_jobs(["-m", "heads=2,3", "model=tiny"], "train", build) == 0


def test_each_job_is_built_as_the_job_builds_it():
    seen = []
    check_sweep_jobs(["-m", "pe=rope,alibi", "heads=1,2"], "train", lambda c, o: seen.append(o))
    assert sorted(" ".join(o) for o in seen) == [
        "pe=alibi heads=1",
        "pe=alibi heads=2",
        "pe=rope heads=1",
        "pe=rope heads=2",
    ]
    with pytest.raises(PosexpError, match=r"^1 sweep job refused, e.g. job pe=rope heads=1: no;"):
        check_sweep_jobs(
            ["-m", "pe=rope", "heads=1"],
            "train",
            lambda c, o: (_ for _ in ()).throw(PosexpError("no")),
        )


def test_a_missing_data_file_refuses_the_sweep_in_process(tmp_path):
    # The text files a job names are checked when its config is built, before the sweep starts.
    real = tmp_path / "a.txt"
    real.write_text("one paragraph\n\nanother\n")
    args = ["-m", "data=text", "model=tiny", "seed=0,1"]
    assert check_sweep_jobs([*args, f"data.files=[{real}]"], "train", build) == 2
    with pytest.raises(
        PosexpError, match=r"2 sweep jobs refused.*data file not found: '.*nope\.txt'"
    ):
        check_sweep_jobs([*args, f"data.files=[{tmp_path}/nope.txt]"], "train", build)
    with pytest.raises(PosexpError, match=r"data.val_files must list existing text files"):
        check_sweep_jobs(
            [*args, f"data.files=[{real}]", "data.val_files=[gone.txt]"], "train", build
        )


def test_a_single_run_is_checked_before_hydra_makes_its_dir(tmp_path):
    from posexp.cli.sweep_check import check_jobs

    assert check_jobs(["pe=rope", "model=tiny"], "train", build) == 1
    with pytest.raises(PosexpError, match=r"^train.max_steps must be a positive integer, got 0$"):
        check_jobs(["train.max_steps=0", "model=tiny"], "train", build)
    with pytest.raises(PosexpError, match=r"^unknown data.sample_by 'bogus'"):
        check_jobs(
            ["data=text", f"data.files=[{tmp_path}]", "data.sample_by=bogus"], "train", build
        )
    # Nothing runs after --cfg or --info; a resume's config is built from the run's, in the task.
    assert check_jobs(["train.max_steps=0", "--cfg", "job"], "train", build) == 0
    assert check_jobs([f"resume={tmp_path}", "train.max_steps=0"], "train", build) == 0


def test_warnings_of_a_config_built_to_check_it_are_left_to_the_job(caplog):
    # The job builds its config again and says them then: said twice otherwise (PoSE's note).
    import logging

    from posexp.cli.sweep_check import check_jobs

    def warn(cfg, overrides):
        logging.getLogger("posexp").warning("a note on %s", overrides)

    with caplog.at_level(logging.WARNING, logger="posexp"):
        assert check_jobs(["pe=rope"], "train", warn) == 1
        assert check_jobs(["-m", "pe=rope,alibi"], "train", warn) == 2
        logging.getLogger("posexp").warning("after")
    assert [r.getMessage() for r in caplog.records] == ["after"]
