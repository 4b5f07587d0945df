"""Records: one typed class, keyed by everything that changes a value, kept apart by weights."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from posexp.errors import PosexpError
from posexp.extension.spec import MethodSpec
from posexp.scoring.records import (
    EVAL_LOCK,
    Checkpoint,
    Record,
    Stored,
    checkpoint_of,
    load,
    merged,
    merging,
)
from posexp.store.rundir import RunDir
from tests.store.test_rundir import make_run

NOW = Checkpoint(400, "ab12cd34ef567890")


def record(**changes) -> Record:
    base = Record(
        spec=MethodSpec("self_extend", {"group": 4}),
        length=64,
        protocol="sliding",
        factor=2.0,
        settings={"window": None, "group": 4, "logn": False},
        stride=16,
        sample_size=2048,
        depth=None,
        precision="fp32",
        checkpoint=NOW,
        metric="ppl",
        values={"ppl": 9.5, "loss": 2.25, "tokens": 2048, "per_position": [2.0, None]},
    )
    return dataclasses.replace(base, **changes)


def test_a_record_comes_back_from_json_as_it_went():
    r = record(note="n", seconds=1.5, compile_seconds=0.25, scored_at="2026-12-03T08:00:00+00:00")
    back = Record.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r and back.key == r.key
    part = record(task="variable_tracking", depth=0.25)
    assert Record.from_dict(json.loads(json.dumps(part.to_dict()))) == part


@pytest.mark.parametrize(
    "change",
    [
        {
            "spec": MethodSpec("self_extend", {"group": 8}),
            "settings": {"window": None, "group": 8, "logn": False},
        },
        {"spec": MethodSpec("self_extend", {"group": 4, "window": 16})},  # another spec asked
        {"spec": MethodSpec("yarn", {"beta_fast": 16.0000001}), "settings": {}},
        {"settings": {"window": 8, "group": 4, "logn": False}},
        {"factor": 4.0},
        {"length": 128},
        {"protocol": "nonoverlap", "stride": None},
        {"stride": 32},
        {"sample_size": 4096},
        {"depth": 0.5},
        {"task": "niah_multikey"},
        {"precision": "bf16"},
        {"checkpoint": Checkpoint(400, "ffff000011112222")},
        {"checkpoint": Checkpoint(600, NOW.sha256)},
    ],
)
def test_everything_that_changes_a_value_is_in_the_key(change):
    assert record(**change).key != record().key


def test_what_does_not_change_a_value_is_not_in_the_key():
    timing = {"seconds": 9.0, "compile_seconds": 1.0, "scored_at": "later", "note": "x"}
    assert record(values={"ppl": 1.0}, **timing).key == record().key


@pytest.mark.parametrize(
    "damage, message",
    [
        ({"length": "x"}, r"record 1\.length must be an integer in \[1, 1099511627776\], got 'x'"),
        (
            {"length": 1e30},
            r"record 1\.length must be an integer in \[1, 1099511627776\], got 1e\+30",
        ),
        ({"method": 5}, r"record 1\.method must be a non-empty string, got 5"),
        ({"method": "yarm"}, r"record 1\.spec: unknown method 'yarm'; allowed: "),
        ({"ppl": "high"}, r"record 1\.ppl must be a finite number >= 1, got 'high'"),
        ({"ppl": [1, 2]}, r"record 1\.ppl must be a finite number >= 1, got \[1, 2\]"),
        ({"ppl": -5}, r"record 1\.ppl must be a finite number >= 1, got -5"),
        ({"accuracy": 1.5}, r"record 1\.accuracy must be a finite number in \[0, 1\], got 1\.5"),
        ({"tokens": -1}, r"record 1\.tokens must be an integer >= 0, got -1"),
        ({"precision": 5}, r"record 1\.precision must be one of fp32, bf16, got 5"),
        ({"speed": 3}, r"record 1\.speed: not a field of an evaluation record; allowed: ppl"),
        (
            {"settings": {"window": None, "group": "x", "logn": False}},
            r"^record 1\.settings\.group must be a positive integer or null, got 'x'",
        ),
        (
            {"settings": {"beta_fast": 16}},
            r"record 1: unknown param 'beta_fast' for extension 'self_extend'",
        ),
        (
            {"spec": {"settings": {"group": 0}, "factor": None}},
            r"record 1\.spec\.group must be a positive integer or null, got 0",
        ),
        ({"checkpoint": {"step": -1, "sha256": "a"}}, r"checkpoint\.step must be an integer >= 0"),
        ({"depth": 2}, r"record 1\.depth must be a finite number in \[0, 1\] or null, got 2"),
    ],
)
def test_a_damaged_record_is_one_line_naming_its_field(damage, message):
    with pytest.raises(PosexpError, match=message):
        Record.from_dict({**record().to_dict(), **damage}, "record 1")


def test_a_new_record_replaces_its_cell_and_keeps_every_other():
    old = [record(length=n) for n in (32, 64, 128)]
    again = record(length=64, values={"ppl": 7.0})
    out = merged(Stored(old, [], NOW), [again, record(length=256)])
    assert [(r.length, r.values["ppl"]) for r in out] == [
        (32, 9.5),
        (64, 7.0),
        (128, 9.5),
        (256, 9.5),
    ]


@pytest.fixture
def run(tmp_path):
    make_run(tmp_path / "run")
    return RunDir(tmp_path / "run")


def write(run: RunDir, name: str, records: list) -> None:
    (run.path / "eval").mkdir(exist_ok=True)
    (run.path / "eval" / name).write_text(json.dumps(records))


def test_records_of_other_weights_are_kept_apart(run):
    now = checkpoint_of(run)
    assert now.step == run.step() and len(now.sha256) == 16
    older = record(checkpoint=Checkpoint(now.step - 1, now.sha256))
    write(run, "extrapolate.json", [record(checkpoint=now).to_dict(), older.to_dict()])
    write(run, "stale.json", [record(length=32, checkpoint=Checkpoint(1, "x")).to_dict()])
    stored = load(run)
    assert [r.checkpoint for r in stored.current] == [now]
    assert sorted(r.length for r in stored.stale) == [32, 64]


def test_a_record_that_names_no_weights_is_set_aside_not_taken_as_stale(run, caplog):
    # posexp has no run format before 0.1.0 to honour: such a record is damaged, said once.
    now = checkpoint_of(run)
    unnamed = {k: v for k, v in record(length=32).to_dict().items() if k != "checkpoint"}
    write(run, "extrapolate.json", [unnamed, record(checkpoint=now).to_dict()])
    stored = load(run)
    assert [r.length for r in stored.current] == [64] and stored.stale == []
    (said,) = [r.getMessage() for r in caplog.records if "damaged record" in r.getMessage()]
    assert "record 1.checkpoint is missing: a record names the weights it scored" in said


def test_new_weights_get_a_new_checkpoint_id(run):
    before = checkpoint_of(run)
    weights = run.path / "checkpoint" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    assert checkpoint_of(run) != before and checkpoint_of(run).step == before.step


@pytest.mark.parametrize("text", ["", "[{", '{"method": "none"}'])
def test_a_damaged_file_is_one_line_unless_forced(run, text):
    (run.path / "eval").mkdir()
    (run.path / "eval" / "extrapolate.json").write_text(text)
    with pytest.raises(
        PosexpError,
        match=r"extrapolate\.json' is unreadable \(.*; move it aside, or rescore its cells with --force\)$",
    ):
        load(run)
    assert load(run, force=True).current == []  # --force: its cells are rescored


@pytest.mark.parametrize("force", [False, True])
def test_a_damaged_record_is_set_aside_named_once_and_the_others_go_on(run, caplog, force):
    now = checkpoint_of(run)
    good = [record(length=n, checkpoint=now).to_dict() for n in (32, 64, 128)]
    bad = {**good[1], "ppl": "abc"}
    write(run, "extrapolate.json", [good[0], bad, good[2]])
    stored = load(run, force=force)
    load(run, force=force)  # read again (a plan, then its merge): said once
    assert [r.length for r in stored.current] == [32, 128]  # the readable records stay
    assert stored.damaged == ["extrapolate.json"]  # so the file is kept as .bak when replaced
    (said,) = [r.getMessage() for r in caplog.records if "damaged record" in r.getMessage()]
    assert "set aside 1 damaged record(s) of 3, not shown as measured (record 2.ppl must be" in said
    assert "\n" not in said


def test_the_merge_lock_keeps_a_second_writer_waiting(run):
    # While this process merges, another process cannot take the lock (it would wait).
    probe = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"
    )
    with merging(run):
        held = subprocess.run([sys.executable, "-c", probe, str(run.path / EVAL_LOCK)])
    assert held.returncode != 0  # BlockingIOError: the lock was held
    free = subprocess.run([sys.executable, "-c", probe, str(run.path / EVAL_LOCK)])
    assert free.returncode == 0
