"""`posexp train` end to end through a subprocess."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from posexp.runtime.weights import load_model
from posexp.store.rundir import RunDir
from tests.helpers import TINY, lock_held_elsewhere, posexp, posexp_env, run_dirs, snapshot

TAGS = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "val/loss", "val/ppl"}


def scalars(run_dir, tag):
    events = EventAccumulator(str(run_dir)).Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


@pytest.mark.parametrize("pe", ["none", "sinusoidal", "learned", "rope", "alibi"])
def test_train_every_pe_end_to_end(tmp_path, cache, pe):
    posexp(tmp_path, cache, "train", f"pe={pe}", *TINY)
    (run,) = run_dirs(tmp_path)
    saved = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    assert (
        saved["pe"]["name"] == pe
        and saved["heads"] == 2
        and saved["model"]["n_heads"] == "${heads}"
    )
    assert "val/loss" in (run / "train.log").read_text()
    events = EventAccumulator(str(run)).Reload()
    assert TAGS <= set(events.Tags()["scalars"])
    assert sorted(e.step for e in events.Scalars("val/loss")) == [0, 3, 6]  # 0: untrained
    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    ).session_start_info
    hp = start.hparams
    # The trial id says what the run is (its overrides), then a tag unique to its dir.
    tag = hashlib.sha1(str(run.resolve()).encode()).hexdigest()[:4]
    assert start.group_name.startswith(f"{pe} h2 tiny L32 6 steps ")
    assert start.group_name.endswith(f" · {tag}") and "device" not in start.group_name
    assert hp["pe"].string_value == pe and hp["heads"].string_value == "2"  # shown as 2, not 2.000
    # Settings by their override names, the training ones too; no plumbing.
    assert hp["train.max_steps"].string_value == "6" and hp["train.seq_len"].string_value == "32"
    assert hp["train.lr"].number_value == pytest.approx(3e-3) and hp["model"].string_value == "tiny"
    assert hp["precision"].string_value in ("fp32", "bf16")
    assert not {"train.threads", "device", "train.log_interval"} & set(hp)
    (text,) = events.Tensors("config/text_summary")
    shown = text.tensor_proto.string_val[0].decode()
    assert shown.startswith("Resolved config (precision: ") and "    pe:" in shown
    assert not any(t.startswith("final/") for t in events.Tags()["scalars"])
    (prov,) = json.loads((run / "provenance.json").read_text())["sessions"]
    assert prov["status"] == "completed" and prov["torch"] == torch.__version__
    assert prov["command"][1:3] == ["train", f"pe={pe}"] and prov["ended"] >= prov["started"]
    log = (run / "train.log").read_text()
    assert "done in " in log and f"run dir {run}" in log  # the end-of-run summary
    assert "step 6/6  loss" in log  # no terminal: a plain progress line per log interval
    # No experiment summary: TensorBoard makes the table's columns from every run's settings
    # (flagging those that differ) and its metrics from every scalar the runs logged.
    assert set(events.PluginTagToContent("hparams")) == {
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
    }
    assert RunDir(run).meta()["step"] == 6
    model = load_model(RunDir(run), torch.device("cpu"))
    assert model.cfg.pe == pe and not model.training
    x = torch.randint(0, model.cfg.vocab_size, (1, 16))
    assert torch.isfinite(model(x)["logits"]).all()


def test_tiny_kjv_run_reaches_measured_val_loss(tmp_path, cache):
    # Measured: byte-level tiny rope model, 150 steps of 16 x 64 tokens reaches val loss ~2.3
    # (ln 260 = 5.56 at init). The threshold leaves margin for thread-count noise.
    posexp(
        tmp_path,
        cache,
        "train",
        "model=tiny",
        "pe=rope",
        "heads=4",
        "train.max_steps=150",
        "train.seq_len=64",
        "train.batch_size=16",
        "train.eval_interval=150",
        "train.eval_tokens=8192",
        "train.checkpoint_interval=150",
        "device=cpu",
    )
    (run,) = run_dirs(tmp_path)
    final = scalars(run, "val/loss")[150]
    assert final < 2.6, final


def signal_after(cwd, cache, args, marker, sig):
    """Run `posexp ARGS`, send ``sig`` once stderr shows ``marker``; (process, rest of stderr)."""
    # A shell's background job ignores SIGINT, and children inherit that: give the child the
    # default action back, so Python installs its KeyboardInterrupt handler as in a terminal.
    proc = subprocess.Popen(
        [sys.executable, "-m", "posexp", *args],
        cwd=cwd,
        env=posexp_env(cache),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    for line in proc.stderr:  # blocks on the child's output; no sleeps
        if marker in line:
            proc.send_signal(sig)
            break
    rest = proc.stderr.read()
    proc.wait()
    return proc, rest


def test_resume_after_kill_gives_the_same_curve(tmp_path, cache):
    args = [
        "train",
        "pe=rope",
        *TINY,
        "train.max_steps=12",
        "train.checkpoint_interval=4",
        "train.eval_interval=4",
    ]
    full_dir = tmp_path / "full"
    posexp(tmp_path, cache, *args, f"hydra.run.dir={full_dir}")
    killed_dir = tmp_path / "killed"
    proc, _ = signal_after(
        tmp_path,
        cache,
        [*args, f"hydra.run.dir={killed_dir}"],
        "checkpoint saved at step 8",
        signal.SIGKILL,
    )
    assert proc.returncode == -signal.SIGKILL
    posexp(tmp_path, cache, "train", f"resume={killed_dir}")
    full, resumed = scalars(full_dir, "train/loss"), scalars(killed_dir, "train/loss")
    assert sorted(resumed) == list(range(1, 13))
    for step in range(1, 13):
        assert math.isclose(full[step], resumed[step], rel_tol=1e-5, abs_tol=1e-6), step
    assert scalars(killed_dir, "val/loss")[12] == pytest.approx(
        scalars(full_dir, "val/loss")[12], rel=1e-5
    )
    # Validation at step 0 (the untrained model) and every eval_interval, once each on resume.
    assert sorted(scalars(full_dir, "val/loss")) == [0, 4, 8, 12]
    assert sorted(scalars(killed_dir, "val/loss")) == [0, 4, 8, 12]


def test_ctrl_c_says_how_to_resume_and_exits_130(tmp_path, cache):
    args = ["train", "pe=rope", *TINY, "train.max_steps=2000", "train.checkpoint_interval=3"]
    run = tmp_path / "run"
    proc, rest = signal_after(
        tmp_path,
        cache,
        [*args, f"hydra.run.dir={run}"],
        "checkpoint saved at step 3",
        signal.SIGINT,
    )
    assert proc.returncode == 130, rest
    assert f"resume with: posexp train resume={run}" in rest and "Traceback" not in rest
    sessions = json.loads((run / "provenance.json").read_text())["sessions"]
    assert sessions[-1]["status"] == "interrupted"


def weights_sha256(run):
    return hashlib.sha256((run / "checkpoint" / "model.safetensors").read_bytes()).hexdigest()


def test_sigterm_checkpoints_the_step_exits_143_and_resumes_to_the_same_weights(tmp_path, cache):
    # One thread in all three: the signalled run is a process of its own, the others are not.
    args = ["train", "pe=rope", *TINY, "train.max_steps=12", "train.checkpoint_interval=3"]
    args.append("train.threads=1")
    full = tmp_path / "full"
    posexp(tmp_path, cache, *args, f"hydra.run.dir={full}")
    run = tmp_path / "run"
    proc, rest = signal_after(
        tmp_path,
        cache,
        [*args, f"hydra.run.dir={run}"],
        "checkpoint saved at step 3",
        signal.SIGTERM,
    )
    assert proc.returncode == 143, rest
    assert "Traceback" not in rest and "received SIGTERM: stopping after this step" in rest
    stopped = re.search(
        r"stopped by SIGTERM at step (\d+), checkpoint saved; resume with: "
        r"posexp train resume=(\S+)",
        rest,
    )
    assert stopped and stopped[2] == str(run), rest
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == int(stopped[1])
    assert (
        json.loads((run / "provenance.json").read_text())["sessions"][-1]["status"] == "interrupted"
    )
    posexp(tmp_path, cache, "train", f"resume={run}")
    # On a mismatch, both runs' logs: what each trained on, with which kernels and threads.
    logs = {r.name: (r / "train.log").read_text()[-4000:] for r in (full, run)}
    assert weights_sha256(run) == weights_sha256(full), logs
    sessions = json.loads((run / "provenance.json").read_text())["sessions"]
    assert [s["status"] for s in sessions] == ["interrupted", "completed"]


def test_a_stop_signal_while_the_run_sets_up_stops_after_its_first_step(
    tmp_path, cache, monkeypatch
):
    # scancel (SIGTERM) or a time-limit signal that comes while the data loads: the session is
    # already recorded from there on, so it must end "interrupted" with a checkpoint, not die.
    import posexp.commands.train as train_module

    handed_on = []  # stands for submitit's handler: the signal is passed on after the stop
    load = train_module.build_data

    def load_then_signal(cfg, *kept):
        data = load(cfg, *kept)
        os.kill(os.getpid(), signal.SIGTERM)
        return data

    monkeypatch.setattr(train_module, "build_data", load_then_signal)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: handed_on.append(signum))
    try:
        run = tmp_path / "run"
        args = ["train", "pe=rope", *TINY, f"hydra.run.dir={run}"]
        proc = posexp(tmp_path, cache, *args, check=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert proc.returncode == 143 and handed_on == [signal.SIGTERM], proc.stderr[-2000:]
    log = (run / "train.log").read_text()
    assert "stopped by SIGTERM at step 1, checkpoint saved" in log
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == 1
    sessions = json.loads((run / "provenance.json").read_text())["sessions"]
    assert [s["status"] for s in sessions] == ["interrupted"]


def test_two_runs_started_together_never_share_a_run_dir(tmp_path, cache):
    # Same overrides, started together: Hydra names both dirs alike (to the second), but each
    # run gets its own dir, checkpoint, log and events; whichever loses the claim says so.
    args = [sys.executable, "-m", "posexp", "train", "pe=rope", *TINY]
    procs = [
        subprocess.Popen(
            args,
            cwd=tmp_path,
            env=posexp_env(cache),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    runs = run_dirs(tmp_path)
    assert len(runs) == 2
    for run in runs:
        assert json.loads((run / "results.json").read_text())["status"] == "completed"
        assert len(list(run.glob("events.out.tfevents.*"))) == 1
        assert (run / "train.log").read_text().count("done in ") == 1
    if runs[0].name.split("_")[:2] == runs[1].name.split("_")[:2]:  # the same second
        assert runs[1].name == f"{runs[0].name}-2" or runs[0].name == f"{runs[1].name}-2"
        assert sum("was taken by a run started in the same second" in e for e in errs) == 1


def test_an_explicit_run_dir_holding_a_run_is_refused_before_hydra_writes(tmp_path, cache):
    run = tmp_path / "run"  # a heads=4 run, finished long ago
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- heads=4\n")
    RunDir(run).write_results({"status": "completed", "step": 6})
    before = snapshot(run)
    proc = posexp(tmp_path, cache, "train", *TINY, "heads=8", f"hydra.run.dir={run}", check=False)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: hydra.run.dir={str(run)!r} already holds a run; continue it "
        f"with `posexp train resume={run}` or choose a new dir\n"
    )
    assert snapshot(run) == before and sorted(tmp_path.iterdir()) == [run]  # no run-2 either


def test_a_second_resume_of_a_run_in_use_is_refused_and_writes_nothing(tmp_path, cache):
    run = tmp_path / "run"
    posexp(tmp_path, cache, "train", "pe=rope", *TINY, f"hydra.run.dir={run}")
    resume = ["train", f"resume={run}", "train.max_steps=12", "train.threads=1"]
    # Skipping the CLI's check reaches the task's own: two resumes that pass the CLI together.
    no_cli_check = (
        "import sys; from posexp.cli import main, overrides; "
        "overrides.check_run_dir_arg = lambda args: None; "
        "sys.argv[0] = 'posexp'; main()"
    )
    with lock_held_elsewhere(run) as other:  # e.g. the first `posexp train resume=` still training
        before = snapshot(run)
        line = (
            f"error: resume={str(run)!r} is being written by another posexp process "
            f"({other.pid}@{platform.node()}); wait for it to end (or stop it), then retry\n"
        )
        proc = posexp(tmp_path, cache, *resume, check=False)
        assert (proc.returncode, proc.stderr) == (2, line)
        task = subprocess.run(
            [sys.executable, "-c", no_cli_check, *resume],
            cwd=tmp_path,
            env=posexp_env(cache),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert task.returncode == 2 and task.stderr.endswith(line.replace("resume=", "run dir "))
        assert "Traceback" not in task.stderr and len(task.stderr.splitlines()) == 1
        assert snapshot(run) == before  # neither wrote a byte: no .hydra, checkpoint, log or events
    posexp(tmp_path, cache, *resume)  # the holder has ended: the run resumes
    assert RunDir(run).step() == 12


def test_ctrl_c_before_the_first_step_removes_the_new_run_dir(tmp_path, cache):
    run = tmp_path / "run"
    # A new token cache: Ctrl-C while its BPE is learned, before any step (and any checkpoint).
    # (Byte tokens of this corpus are cached in milliseconds: a Ctrl-C sent on that line could
    # land after the first step.)
    proc, rest = signal_after(
        tmp_path,
        tmp_path / "new-cache",
        [
            "train",
            "pe=rope",
            *TINY,
            "tokenizer=bpe",
            "train.max_steps=2000",
            "train.checkpoint_interval=1000",
            f"hydra.run.dir={run}",
        ],
        "training a",
        signal.SIGINT,
    )
    assert proc.returncode == 130, rest
    assert rest.splitlines()[-1] == "interrupted" and "Traceback" not in rest
    assert f"nothing to resume; removed {run}" in rest
    assert not run.exists()  # nothing to resume: removed, as after an error


def test_a_resumed_run_is_unfinished_until_it_completes_again(tmp_path, cache):
    # Its results.json of the session before stayed: `runs` and `report` called it completed,
    # with those metrics, while the resume trained, and after a SIGKILL or SIGTERM.
    run = tmp_path / "run"
    posexp(tmp_path, cache, "train", "pe=rope", *TINY, f"hydra.run.dir={run}")
    assert RunDir(run).status() == "completed"
    args = ["train", f"resume={run}", "train.max_steps=400"]
    proc, rest = signal_after(tmp_path, cache, args, "resumed", signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert RunDir(run).status() == "unfinished" and not (run / "results.json").exists()


def test_resuming_longer_never_raises_the_lr_and_records_the_choice(tmp_path, cache):
    run = tmp_path / "run"
    posexp(
        tmp_path,
        cache,
        "train",
        "pe=rope",
        *TINY,
        "train.lr=0.01",
        "train.min_lr=0.001",
        f"hydra.run.dir={run}",
    )
    proc = posexp(tmp_path, cache, "train", f"resume={run}", "train.max_steps=9")
    assert "LR schedule kept as the run began (train.resume_schedule=keep)" in proc.stderr
    lr = scalars(run, "train/lr")
    assert all(lr[s] <= lr[6] + 1e-12 for s in (7, 8, 9))  # at min_lr, never back up
    assert lr[9] == pytest.approx(0.001)
    sessions = json.loads((run / "provenance.json").read_text())["sessions"]
    assert sessions[-1]["schedule"] == {"warmup_steps": 2, "decay_steps": 6, "on_resume": "keep"}
    stretched = posexp(
        tmp_path,
        cache,
        "train",
        f"resume={run}",
        "train.max_steps=12",
        "train.resume_schedule=stretch",
    )
    assert "the LR goes from 0.001 to" in stretched.stderr
