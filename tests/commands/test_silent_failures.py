"""Nothing hangs, nothing is taken for what it is not, nothing is lost (docs/reliability.md).

Each case is the real command through its entry point: a one-line error naming the bad value,
a non-zero exit, no traceback, nothing half-written; or, for a damaged file, its name in one
line and its bytes kept in a ``.bak`` beside it. Signals need a process of their own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posexp.rundir import RunDir
from tests.helpers import TINY, posexp, posexp_env

NOT_UTF8 = os.fsdecode(b"run-\xff")  # a name the shell passes as bytes, not UTF-8


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cache):
    """One tiny trained run, evaluated once; tests copy it before damaging anything."""
    root = tmp_path_factory.mktemp("trained")
    run = root / "run"
    posexp(root, cache, "train", "pe=rope", *TINY, f"hydra.run.dir={run}")
    posexp(
        root, cache, "eval-extrapolate", "--run", str(run), "--lengths", "32,64", "--method", "none"
    )
    return run


def copy_of(run: Path, where: Path, name: str = "run") -> Path:
    """A copy of ``run`` under ``where`` (its writer lock left behind)."""
    target = where / name
    shutil.copytree(run, target, ignore=shutil.ignore_patterns(".owner", ".eval.lock"))
    return target


def one_line_error(proc, *parts: str) -> str:
    """The command failed with exit 2 and one line naming every part, no traceback."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


# ---- paths: empty, not UTF-8, unwritable -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["train", "hydra.run.dir="], "hydra.run.dir is an empty path"),
        (["train", "-m", "hydra.sweep.dir=", "heads=1,2"], "hydra.sweep.dir is an empty path"),
        (["train", "resume="], "resume= is an empty path"),
        (["train", "parent="], "parent is an empty path"),
        (["train", "cache_dir="], "cache_dir is an empty path"),
        (["report", ""], "report target is an empty path"),
        (["runs", ""], "runs: FOLDER is an empty path"),
        (["eval-extrapolate", "--run", ""], "--run is an empty path"),
        (["generate", "--run", "", "hi"], "--run is an empty path"),
        (["finetune", "--run", ""], "--run is an empty path"),
    ],
)
def test_an_empty_path_is_refused_and_nothing_is_written_here(tmp_path, cache, args, named):
    proc = posexp(tmp_path, cache, *args, check=False)
    one_line_error(proc, named)
    assert list(tmp_path.iterdir()) == []  # no report.md, no .owner, no outputs/ in this folder


@pytest.mark.parametrize(
    "args",
    [
        ["train", f"hydra.run.dir={NOT_UTF8}"],
        ["train", f"resume={NOT_UTF8}"],
        ["report", NOT_UTF8],
        ["runs", NOT_UTF8],
        ["eval-extrapolate", "--run", NOT_UTF8],
        ["generate", "--run", NOT_UTF8, "hi"],
    ],
)
def test_a_path_that_is_not_utf8_is_refused_by_name(tmp_path, cache, trained, args):
    copy_of(trained, tmp_path, NOT_UTF8)  # an intact run under that name: not called corrupt
    proc = posexp(tmp_path, cache, *args, check=False)
    one_line_error(proc, "b'", "\\xff", "is not a UTF-8 name; rename it")
    assert sorted(p.name for p in tmp_path.iterdir()) == [NOT_UTF8]


def test_a_job_dir_that_is_not_utf8_in_a_sweep_is_named(tmp_path, cache, trained):
    sweep = tmp_path / "sweep"
    copy_of(trained, sweep, "heads=2")
    copy_of(trained, sweep, NOT_UTF8)
    proc = posexp(tmp_path, cache, "report", str(sweep), "--no-eval", check=False)
    one_line_error(proc, "run dir in", "is not a UTF-8 name")
    assert not (sweep / "report.md").exists()


def test_a_cache_dir_that_cannot_be_written_is_refused_before_the_run_dir(tmp_path, cache):
    (tmp_path / "a-file").write_text("")
    for value, named in [
        ("/proc/nope", "'/proc' refuses new files"),
        (str(tmp_path / "a-file" / "cache"), "is a file"),
    ]:
        proc = posexp(tmp_path, cache, "train", *TINY, f"cache_dir={value}", check=False)
        one_line_error(proc, f"cache_dir {value!r}", named)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no outputs/runs/<run>


def test_the_cache_from_the_environment_is_checked_too(tmp_path, cache, monkeypatch):
    proc = subprocess.run(
        [sys.executable, "-m", "posexp", "train", *TINY],
        cwd=tmp_path,
        env={**posexp_env(cache), "POSEXP_CACHE": "/proc/nope"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(proc, "POSEXP_CACHE '/proc/nope' is not writable")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def read_only_mount(tmp_path):
    """A read-only tmpfs (root only; skipped where mounts are not allowed)."""
    target = tmp_path / "ro"
    target.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)], capture_output=True
        ).returncode
    ):
        pytest.skip("needs root and mount (a read-only tmpfs)")
    yield target
    subprocess.run(["umount", str(target)], check=True)


def test_a_read_only_mount_is_refused_for_the_cache_and_the_run_dir(
    tmp_path, cache, read_only_mount
):
    for key in ("cache_dir", "hydra.run.dir"):
        proc = posexp(
            tmp_path, cache, "train", *TINY, f"{key}={read_only_mount / 'x'}", check=False
        )
        one_line_error(proc, f"{key} {str(read_only_mount / 'x')!r} is not writable", "read-only")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"]


# ---- values taken for what they are not ------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["train.min_lr=1", "train.lr=0.003"], "train.min_lr=1 is above train.lr=0.003"),
        (["train.min_lr=0.0031", "train.lr=0.003"], "train.min_lr=0.0031 is above"),
        (["train.warmup_steps=60", "train.max_steps=50"], "train.warmup_steps=60 must be below"),
        (["train.warmup_steps=6", "train.max_steps=6"], "train.warmup_steps=6 must be below"),
        (["train.stop_grace_s=0"], "train.stop_grace_s must be a finite number > 0 or null"),
        (["train.stop_grace_s=soon"], "train.stop_grace_s must be a finite number > 0 or null"),
    ],
)
def test_settings_that_contradict_each_other_are_refused(tmp_path, cache, overrides, named):
    proc = posexp(tmp_path, cache, "train", *TINY, *overrides, check=False)
    one_line_error(proc, named)
    assert not list((tmp_path / "outputs" / "runs").glob("*"))  # no run dir stays


def test_a_sweep_dir_given_as_one_run_is_named_with_its_jobs(tmp_path, cache, trained):
    sweep = tmp_path / "sweep"
    for job in ("pe=rope", "pe=alibi"):
        copy_of(trained, sweep, job)
    proc = posexp(tmp_path, cache, "generate", "--run", str(sweep), "hi", check=False)
    one_line_error(proc, "is a folder of 2 runs (pe=alibi, pe=rope); pass one of them")
    proc = posexp(tmp_path, cache, "finetune", "--run", str(sweep), check=False)
    one_line_error(proc, "is a folder of 2 runs")


def test_a_folder_that_is_not_a_run_is_not_called_unfinished(tmp_path, cache):
    (tmp_path / "empty").mkdir()
    proc = posexp(tmp_path, cache, "generate", "--run", str(tmp_path / "empty"), "hi", check=False)
    line = one_line_error(proc, "is not a run dir (it holds no checkpoint/")
    assert "unfinished" not in line


def test_a_prompt_that_is_not_utf8_is_one_line(tmp_path, cache, trained):
    proc = posexp(tmp_path, cache, "generate", "--run", str(trained), "fine", NOT_UTF8, check=False)
    one_line_error(proc, "prompt 2 is not UTF-8 text (byte b'\\xff' at 4)")


# ---- damaged files: named, never dropped, never overwritten without a .bak -------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b'[{"meth', "not JSON"),
        (b'{"records": []}', "expected a list of records"),
        (b"\xff\xfe[]", "not UTF-8"),
    ],
)
def test_a_damaged_record_file_is_named_in_the_report(tmp_path, cache, trained, content, reason):
    run = copy_of(trained, tmp_path)
    (run / "eval" / "extrapolate.json").write_bytes(content)
    proc = posexp(tmp_path, cache, "report", str(run), "--no-eval", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    said = proc.stdout + proc.stderr
    assert "evaluation not read" in said and reason in said
    assert reason in (run / "report.md").read_text()  # the section says why it is missing
    assert (run / "eval" / "extrapolate.json").read_bytes() == content  # untouched


BAD_RECORDS = {
    "ppl a list": ({"ppl": [1, 2]}, "ppl must be a finite number >= 1, got [1, 2]"),
    "ppl negative": ({"ppl": -5}, "ppl must be a finite number >= 1, got -5"),
    "precision 5": ({"precision": 5}, "precision must be one of fp32, bf16, got 5"),
    "a setting of another type": (
        {"method": "yarn", "settings": {"beta_fast": "x"}},
        "beta_fast must be a finite number > 0, got 'x'",
    ),
    "length 1e30": ({"length": 1e30}, "length must be an integer in [1, 1099511627776], got 1e+30"),
    "no method": ({"method": 5}, "method must be a non-empty string, got 5"),
}


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_a_bad_record_is_set_aside_named_once_and_everything_else_goes_on(
    tmp_path, cache, trained, name, caplog
):
    change, reason = BAD_RECORDS[name]
    run = copy_of(trained, tmp_path)
    path = run / "eval" / "extrapolate.json"
    good = json.loads(path.read_text())
    damaged = json.dumps([*good, {**good[0], **change}])
    path.write_text(damaged)
    args = ["eval-extrapolate", "--run", str(run), "--lengths", "32,64", "--method", "none"]
    for extra in ([], ["--force"]):
        path.write_text(damaged)  # a new version of the file: warned of again
        caplog.clear()
        with caplog.at_level(logging.WARNING, "posexp"):
            proc = posexp(tmp_path, cache, *args, *extra)
        said = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
        assert len(said) == 1 and reason in said[0] and "Traceback" not in proc.stderr, (
            extra,
            said,
        )
        assert "record 3." in said[0] and str(path) in said[0]
    # --force wrote the file again: the bad record is in the .bak only, never in the new one
    assert (run / "eval" / "extrapolate.json.bak").read_text() == damaged
    kept = json.loads(path.read_text())
    assert [r["length"] for r in kept] == [32, 64]
    path.write_text(damaged)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "posexp"):
        report = posexp(tmp_path, cache, "report", str(run), "--no-eval")
    assert "Traceback" not in report.stderr
    assert any("set aside" in r.getMessage() for r in caplog.records)
    md = (run / "report.md").read_text()
    assert "-5" not in md and "1e+30" not in md
    runs = posexp(tmp_path, cache, "runs", str(tmp_path), "--json")
    (row,) = json.loads(runs.stdout)
    assert row["evaluated"]["cells"] == 2  # the good records only


def test_force_replaces_a_damaged_record_file_and_keeps_it_as_bak(tmp_path, cache, trained):
    run = copy_of(trained, tmp_path)
    (run / "eval" / "extrapolate.json").write_bytes(b'[{"meth')
    args = ["eval-extrapolate", "--run", str(run), "--lengths", "32", "--method", "none"]
    one_line_error(posexp(tmp_path, cache, *args, check=False), "extrapolate.json", "--force")
    posexp(tmp_path, cache, *args, "--force")
    assert (run / "eval" / "extrapolate.json.bak").read_bytes() == b'[{"meth'
    assert [r["length"] for r in json.loads((run / "eval" / "extrapolate.json").read_text())] == [
        32
    ]


@pytest.mark.parametrize(
    "content",
    [
        b'{"status": "compl',
        b"[1, 2]",
        b'{"status": 5}',
        b'{"status": "completed", "final/val_ppl": "low"}',
    ],
)
def test_a_damaged_results_file_is_unreadable_everywhere(tmp_path, cache, trained, content):
    run = copy_of(trained, tmp_path)
    (run / "results.json").write_bytes(content)
    assert RunDir(run).status() == "unreadable" and RunDir(run).results() is None
    table = posexp(tmp_path, cache, "runs", str(tmp_path))
    assert "results.json' is unreadable" in table.stdout
    (row,) = json.loads(posexp(tmp_path, cache, "runs", str(tmp_path), "--json").stdout)
    assert row["status"] == "unreadable" and "results.json" in row["unreadable"][0]


def test_a_damaged_results_file_is_kept_when_a_rerun_sweep_replaces_it(tmp_path):
    from posexp.runtime.sweeps import continue_unfinished

    run = tmp_path / "job"
    run.mkdir()
    (run / "results.json").write_bytes(b'{"status": "fai')
    RunDir(run).write_results({"status": "failed", "error": "x"})
    assert (run / "results.json.bak").read_bytes() == b'{"status": "fai'
    (run / "results.json").write_bytes(b"[]")
    assert continue_unfinished(None, run) is False  # no checkpoint: trained again from scratch
    assert (run / "results.json.bak.2").read_bytes() == b"[]" and not (
        run / "results.json"
    ).exists()


@pytest.mark.parametrize("content", [b'{"sessions": [{"started"', b"[]", b'{"sessions": ["x"]}'])
def test_a_damaged_provenance_is_kept_as_bak_on_resume_and_said(tmp_path, cache, trained, content):
    run = copy_of(trained, tmp_path)
    (run / "provenance.json").write_bytes(content)
    listed = posexp(tmp_path, cache, "runs", str(tmp_path))
    assert "provenance.json' is unreadable" in listed.stdout
    proc = posexp(tmp_path, cache, "train", f"resume={run}", "train.max_steps=8")
    assert "its sessions are kept in" in proc.stderr
    assert (run / "provenance.json.bak").read_bytes() == content
    sessions = json.loads((run / "provenance.json").read_text())["sessions"]
    assert [s["status"] for s in sessions] == ["completed"]  # this session; the rest in the .bak


def test_an_unparseable_hydra_record_is_kept_as_bak_on_resume_and_said(tmp_path, cache, trained):
    run = copy_of(trained, tmp_path)
    record = run / ".hydra" / "config.yaml"
    record.write_bytes(b"train: [max_steps: 8\n")  # edited by hand, no longer YAML
    proc = posexp(tmp_path, cache, "train", f"resume={run}", "train.max_steps=8")
    assert re.search(r"config\.yaml did not parse \(.*\): kept as config\.yaml\.bak", proc.stderr)
    assert (run / ".hydra" / "config.yaml.bak").read_bytes() == b"train: [max_steps: 8\n"
    assert yaml.safe_load(record.read_text())["train"]["max_steps"] == 8


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b'{"step": 6, "mod', "not JSON"), (b'{"step": "x"}', "step must be an integer >= 0")],
)
def test_a_damaged_checkpoint_meta_is_named_corrupt(tmp_path, cache, trained, content, reason):
    run = copy_of(trained, tmp_path)
    (run / "checkpoint" / "meta.json").write_bytes(content)
    for args in (["generate", "--run", str(run), "hi"], ["train", f"resume={run}"]):
        one_line_error(posexp(tmp_path, cache, *args, check=False), "corrupt checkpoint", reason)


def test_weights_cut_short_are_refused_before_the_records_are_judged_by_them(
    tmp_path, cache, trained
):
    run = copy_of(trained, tmp_path)
    weights = run / "checkpoint" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    records = (run / "eval" / "extrapolate.json").read_bytes()
    args = ["eval-extrapolate", "--run", str(run), "--lengths", "32", "--method", "none"]
    proc = posexp(tmp_path, cache, *args, check=False)
    one_line_error(proc, f"corrupt checkpoint in {str(run)!r}", "is cut short (1,000 bytes)")
    assert "stale" not in proc.stdout + proc.stderr  # its records were not said to move
    assert (run / "eval" / "extrapolate.json").read_bytes() == records


def test_a_damaged_precision_cache_is_measured_again_and_kept(tmp_path):
    import torch

    from posexp.runtime.precision import cpu_bf16_speedup

    first, _ = cpu_bf16_speedup(64, tmp_path)
    (path,) = (tmp_path / "precision").glob("cpu_bf16_*.json")
    path.write_bytes(b'{"key": ')
    again, _ = cpu_bf16_speedup(64, tmp_path)
    assert again > 0 and first > 0 and torch.get_num_threads() >= 1
    assert path.with_name(path.name + ".bak").read_bytes() == b'{"key": '
    assert json.loads(path.read_text())["speedup"] == again


# ---- sizes the machine cannot hold -----------------------------------------------------------


def test_a_step_that_cannot_fit_is_refused_before_it_starts(tmp_path, cache):
    args = [
        "train",
        *TINY,
        "train.seq_len=100000",
        "train.batch_size=4096",
        "train.eval_tokens=200000",
    ]
    proc = posexp(tmp_path, cache, *args, check=False)
    one_line_error(proc, "one training step needs at least", "train.batch_size=4096", "free")
    assert not list((tmp_path / "outputs" / "runs").glob("*"))


# ---- signals inside a step that does not end -------------------------------------------------

# A first step of minutes on any CPU (a 64k-token row): the signals arrive inside it.
SLOW = ["train", *TINY, "train.seq_len=65536", "train.batch_size=8", "train.eval_tokens=140000"]


def stopped_inside_a_step(tmp_path, cache, signals, *extra):
    """Start a run whose first step takes minutes, send ``signals`` once it trains; the
    process's exit code and stderr."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "posexp", *SLOW, *extra, f"hydra.run.dir={run}"],
        cwd=tmp_path,
        env=posexp_env(cache),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen, pending = [], list(signals)
    for line in proc.stderr:  # blocks on the child's output; no sleeps
        seen.append(line)
        # the last line before the loop, then the first signal's acknowledgement: two
        # signals sent together may be handled lowest number first, whatever the send order
        if "precision:" in line or "stopping after this step" in line:
            proc.send_signal(pending.pop(0))
            if not pending:
                break
    rest = "".join(seen) + proc.stderr.read()
    proc.wait(timeout=120)
    return proc.returncode, rest, run


def test_sigterm_then_sigint_inside_a_long_step_exit_at_once_without_a_traceback(tmp_path, cache):
    code, err, run = stopped_inside_a_step(tmp_path, cache, [signal.SIGTERM, signal.SIGINT])
    assert code == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "stopped at once (a second stop signal, SIGINT): no checkpoint yet" in err
    assert not run.exists()  # nothing to resume: removed, never left unusable


def test_a_step_outlasting_the_grace_period_ends_at_once(tmp_path, cache):
    code, err, run = stopped_inside_a_step(
        tmp_path, cache, [signal.SIGTERM], "train.stop_grace_s=1"
    )
    assert code == 143, err[-2000:]
    assert "slow: one step takes at least" in err  # said before the step began
    assert "stopped at once (SIGTERM 1 s ago and the step had not ended)" in err
    assert "Traceback" not in err and not run.exists()
