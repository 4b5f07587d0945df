"""A full disk, for real: a 1.5 MB tmpfs as the run dir, through the real CLI.

Every command says so in one line, leaves no staging folder behind, and the run dir tells the
truth: the last whole checkpoint, results.json and provenance.json saying the session failed.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import TINY, posexp_command

SIZE = "1500k"  # room for one checkpoint of the tiny model, not for a second beside it


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of SIZE mounted for the test (needs root, as on the development machine and CI)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_a_full_disk_ends_every_command_in_one_line_and_the_run_dir_tells_the_truth(
    small_disk, tmp_path, cache
):
    run = small_disk / "run"
    train = ["train", "pe=rope", *TINY, "train.max_steps=30", f"hydra.run.dir={run}"]
    proc = posexp_command(tmp_path, cache, *train, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert last_line(proc) == (
        f"error: no space left on device writing '{run}/checkpoint' (the previous checkpoint is "
        f"kept); free some space, then resume"
    )
    assert not (run / "checkpoint.tmp").exists() and not (run / "checkpoint.old").exists()
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == 3
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "failed" and "no space left on device" in results["error"]
    sessions = json.loads((run / "provenance.json").read_text())["sessions"]
    assert sessions[-1]["status"] == "failed" and sessions[-1]["ended"]

    # Fill what is left (dd stops at the end of the device): nothing more fits.
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={small_disk / 'filler'}", "bs=4k"], capture_output=True
    )
    for command in (
        ["eval-extrapolate", "--run", str(run), "--lengths", "32,64", "--tokens", "256"],
        ["report", str(run)],
        ["train", f"resume={run}"],
    ):
        proc = posexp_command(tmp_path, cache, *command, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, command
        assert "no space left on device" in last_line(proc), command
        assert not any(p.name.endswith(".tmp") for p in run.iterdir()), command
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == 3


def test_a_new_run_that_cannot_write_leaves_nothing_behind(small_disk, tmp_path, cache):
    fill = subprocess.run(
        ["dd", "if=/dev/zero", f"of={small_disk / 'filler'}", "bs=1k", "count=1100"],
        capture_output=True,
    )
    assert fill.returncode == 0  # room left for the run's record, not for its first checkpoint
    run = small_disk / "run"
    proc = posexp_command(
        tmp_path, cache, "train", "pe=rope", *TINY, f"hydra.run.dir={run}", check=False
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert last_line(proc) == (
        f"error: no space left on device writing '{run}/checkpoint' (no checkpoint yet); free "
        f"some space, then rerun"
    )
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no half-written run dir

    subprocess.run(
        [
            "dd",
            "if=/dev/zero",
            f"of={small_disk / 'filler'}",
            "bs=4k",
            "oflag=append",
            "conv=notrunc",
        ],
        capture_output=True,
    )  # now nothing fits
    proc = posexp_command(
        tmp_path, cache, "train", "pe=rope", *TINY, f"hydra.run.dir={run}", check=False
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: no space left on device writing '{run}'; free some space"
    ]
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]
