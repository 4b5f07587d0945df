"""`posexp train` end to end through a subprocess."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from posexp.rundir import RunDir
from tests.helpers import TINY, posexp, posexp_env, run_dirs

TAGS = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "val/loss", "val/ppl"}


def scalars(run_dir, tag):
    events = EventAccumulator(str(run_dir)).Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


@pytest.mark.parametrize("pe", ["none", "sinusoidal", "learned", "rope", "alibi"])
def test_train_every_pe_end_to_end(tmp_path, cache, pe):
    posexp(tmp_path, cache, "train", f"pe={pe}", *TINY)
    (run,) = run_dirs(tmp_path)
    saved = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    assert saved["pe"]["name"] == pe and saved["heads"] == 2 and saved["model"]["n_heads"] == "${heads}"
    assert "val/loss" in (run / "train.log").read_text()
    events = EventAccumulator(str(run)).Reload()
    assert TAGS <= set(events.Tags()["scalars"])
    assert sorted(e.step for e in events.Scalars("val/loss")) == [3, 6]
    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
    hp = start.hparams
    # The trial id says what the run is before TensorBoard's narrow column cuts it.
    assert start.group_name == f"{pe} h2 kjv seed 0 · {run.name}"
    assert hp["pe"].string_value == pe and hp["heads"].string_value == "2"  # shown as 2, not 2.000
    assert not any(t.startswith("final/") for t in events.Tags()["scalars"])
    (prov,) = json.loads((run / "provenance.json").read_text())["sessions"]
    assert prov["status"] == "completed" and prov["torch"] == torch.__version__
    assert prov["command"][1:3] == ["train", f"pe={pe}"] and prov["ended"] >= prov["started"]
    log = (run / "train.log").read_text()
    assert "done in " in log and f"run dir {run}" in log  # the end-of-run summary
    assert "step 6/6  loss" in log  # no terminal: a plain progress line per log interval
    metrics = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/experiment"]
    ).experiment.metric_infos
    assert {m.name.tag for m in metrics} == {"val/loss", "val/ppl"}  # logged at the last step
    infos = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/experiment"]).experiment.hparam_infos
    # TensorBoard shows the 5 "differs" columns first: the ones PE experiments are compared by.
    assert sorted(i.name for i in infos if i.differs) == ["data", "extension", "heads", "pe", "seed"]
    assert RunDir(run).meta()["step"] == 6
    model = RunDir(run).load_model(torch.device("cpu"))
    assert model.cfg.pe == pe and not model.training
    x = torch.randint(0, model.cfg.vocab_size, (1, 16))
    assert torch.isfinite(model(x)["logits"]).all()


def test_tiny_kjv_run_reaches_measured_val_loss(tmp_path, cache):
    # Measured: byte-level tiny rope model, 150 steps of 16 x 64 tokens reaches val loss ~2.3
    # (ln 260 = 5.56 at init). The threshold leaves margin for thread-count noise.
    posexp(tmp_path, cache, "train", "model=tiny", "pe=rope", "heads=4", "train.max_steps=150",
           "train.seq_len=64", "train.batch_size=16", "train.eval_interval=150",
           "train.eval_tokens=8192", "train.checkpoint_interval=150", "device=cpu")
    (run,) = run_dirs(tmp_path)
    final = scalars(run, "val/loss")[150]
    assert final < 2.6, final


def signal_after(cwd, cache, args, marker, sig):
    """Run `posexp ARGS`, send ``sig`` once stderr shows ``marker``; (process, rest of stderr)."""
    # A shell's background job ignores SIGINT, and children inherit that: give the child the
    # default action back, so Python installs its KeyboardInterrupt handler as in a terminal.
    proc = subprocess.Popen([sys.executable, "-m", "posexp", *args], cwd=cwd, env=posexp_env(cache),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stderr:  # blocks on the child's output; no sleeps
        if marker in line:
            proc.send_signal(sig)
            break
    rest = proc.stderr.read()
    proc.wait()
    return proc, rest


def test_resume_after_kill_gives_the_same_curve(tmp_path, cache):
    args = ["train", "pe=rope", *TINY, "train.max_steps=12", "train.checkpoint_interval=4",
            "train.eval_interval=4"]
    full_dir = tmp_path / "full"
    posexp(tmp_path, cache, *args, f"hydra.run.dir={full_dir}")
    killed_dir = tmp_path / "killed"
    proc, _ = signal_after(tmp_path, cache, [*args, f"hydra.run.dir={killed_dir}"],
                           "checkpoint saved at step 8", signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    posexp(tmp_path, cache, "train", f"resume={killed_dir}")
    full, resumed = scalars(full_dir, "train/loss"), scalars(killed_dir, "train/loss")
    assert sorted(resumed) == list(range(1, 13))
    for step in range(1, 13):
        assert math.isclose(full[step], resumed[step], rel_tol=1e-5, abs_tol=1e-6), step
    assert scalars(killed_dir, "val/loss")[12] == pytest.approx(scalars(full_dir, "val/loss")[12], rel=1e-5)


def test_ctrl_c_says_how_to_resume_and_exits_130(tmp_path, cache):
    args = ["train", "pe=rope", *TINY, "train.max_steps=2000", "train.checkpoint_interval=3"]
    run = tmp_path / "run"
    proc, rest = signal_after(tmp_path, cache, [*args, f"hydra.run.dir={run}"],
                              "checkpoint saved at step 3", signal.SIGINT)
    assert proc.returncode == 130, rest
    assert f"resume with: posexp train resume={run}" in rest and "Traceback" not in rest
    sessions = json.loads((run / "provenance.json").read_text())["sessions"]
    assert sessions[-1]["status"] == "interrupted"


def test_two_runs_started_together_never_share_a_run_dir(tmp_path, cache):
    # Same overrides, started together: Hydra names both dirs alike (to the second), but each
    # run gets its own dir, checkpoint, log and events; whichever loses the claim says so.
    args = [sys.executable, "-m", "posexp", "train", "pe=rope", *TINY]
    procs = [subprocess.Popen(args, cwd=tmp_path, env=posexp_env(cache), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
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
