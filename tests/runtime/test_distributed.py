"""DDP on CPU (gloo, 2 processes): the same training as one process with the same global batch."""

from __future__ import annotations

import hashlib
import json
import math
import re
import signal
import subprocess
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import posexp
from posexp.commands.train import run_training
from posexp.config import from_composed
from posexp.config.paths import config_dir
from posexp.runtime import distributed
from tests.helpers import TINY, posexp_env, run_dirs


def scalars(run_dir: Path, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in EventAccumulator(str(run_dir)).Reload().Scalars(tag)}


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """A global batch of 4 rows whose rows score different numbers of targets (-100 = none)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, 3, generator=g)
    y = torch.randint(0, 7, (4, 5), generator=g)
    y[0, :4] = -100  # rank 0's rows score 1 + 5 targets, rank 1's 5 + 2
    y[3, 2:] = -100
    return x, y


def loss_of(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(
        model(x).reshape(-1, 7), y.reshape(-1), ignore_index=-100
    )


def test_weighted_shards_average_to_the_global_gradient():
    # What DDP computes: the mean over ranks of each rank's weighted gradient.
    x, y = batch()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 7)
    grads, means = [], []
    for rank in range(2):
        xs, ys, weight = distributed.shard_rows(x, y, rank, 2)
        model.zero_grad()
        loss = loss_of(model, xs, ys)
        (loss * weight).backward()
        grads.append(model.weight.grad.clone())
        means.append(loss.item() * weight)
    model.zero_grad()
    loss = loss_of(model, x, y)  # one process, whole batch: mean over all scored targets
    loss.backward()
    assert torch.allclose((grads[0] + grads[1]) / 2, model.weight.grad, atol=1e-6)
    assert math.isclose(sum(means) / 2, loss.item(), rel_tol=1e-6)  # global_mean's sum


def test_stray_run_dirs_of_other_ranks_are_removed_only_if_untouched(tmp_path):
    stray, used = tmp_path / "stray", tmp_path / "used"
    for d in (stray, used):  # what each rank's Hydra leaves: its own ${now} dir
        (d / ".hydra").mkdir(parents=True)
        (d / "train.log").write_text("")
    (used / "results.json").write_text("{}")
    distributed.remove_stray_dir(stray)
    distributed.remove_stray_dir(used)
    assert not stray.exists() and (used / "results.json").exists()


def test_two_gloo_processes_follow_the_one_process_loss_curve(tmp_path, cache):
    overrides = ["pe=rope", *TINY, "train.batch_size=4"]  # the global batch in both runs
    ddp = tmp_path / "ddp"
    ddp.mkdir()
    torchrun = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "posexp",
            "train",
            *overrides,
        ],
        cwd=ddp,
        env=posexp_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Meanwhile the same training in this process (no torchrun): the reference curve.
    one = tmp_path / "one"
    one.mkdir()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("train", [*overrides, f"cache_dir={cache}"])
    run_training(from_composed(cfg), one)
    _, stderr = torchrun.communicate(timeout=600)
    assert torchrun.returncode == 0, stderr[-3000:]
    (run,) = run_dirs(ddp)  # both ranks used rank 0's run dir; no stray second dir
    a, b = scalars(one, "train/loss"), scalars(run, "train/loss")
    assert sorted(b) == list(range(1, 7))
    for step in a:
        assert math.isclose(a[step], b[step], rel_tol=1e-4), (step, a[step], b[step])
    assert math.isclose(scalars(one, "val/loss")[6], scalars(run, "val/loss")[6], rel_tol=1e-4)
    log = (run / "train.log").read_text()
    assert log.count("checkpoint saved at step 6") == 1  # rank 0 alone writes the log
    assert (run / "results.json").exists() and (run / "checkpoint" / "meta.json").exists()


def torchrun(cwd: Path, cache: Path, *args: str) -> subprocess.Popen:
    """`torchrun --nproc_per_node=2 -m posexp train ARGS` in ``cwd``, stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
        + ["-m", "posexp", "train", *args],
        cwd=cwd,
        env=posexp_env(cache),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_under_torchrun_stops_every_rank_and_resumes_to_the_same_weights(tmp_path, cache):
    args = ["pe=rope", *TINY, "train.batch_size=4", "train.max_steps=40"]
    args += ["train.checkpoint_interval=5", "train.log_interval=5", "train.threads=1"]
    full = tmp_path / "full"
    proc = torchrun(tmp_path, cache, *args, f"hydra.run.dir={full}")
    assert proc.wait(timeout=600) == 0, proc.stderr.read()[-3000:]
    run = tmp_path / "run"
    proc = torchrun(tmp_path, cache, *args, f"hydra.run.dir={run}")
    for line in proc.stderr:  # blocks on the ranks' output; no sleeps
        if "checkpoint saved at step 5" in line:
            proc.send_signal(signal.SIGTERM)  # to torchrun, which hands it to both ranks
            break
    rest = proc.stderr.read()
    proc.wait(timeout=600)
    # torchrun itself ends on the signal with its own SignalException traceback (exit 1);
    # no rank raised: no frame of posexp's code in the output (the package's own folder: a
    # checkout named posexp/ also holds torch's frames, under posexp/.venv/).
    package = re.escape(str(Path(posexp.__file__).resolve().parent))
    assert proc.returncode != 0 and not re.search(rf'File "{package}/', rest), rest[-3000:]
    # Both ranks stopped after the same logging step; rank 0 alone wrote its checkpoint.
    stopped = re.findall(r"stopped by SIGTERM at step (\d+), checkpoint saved", rest)
    assert len(stopped) == 1, rest[-3000:]
    step = int(stopped[0])
    # The signal may land before the stop check of step 5 itself (its checkpoint just saved).
    assert 5 <= step < 40 and step % 5 == 0
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == step
    sessions = json.loads((run / "provenance.json").read_text())["sessions"]
    assert [s["status"] for s in sessions] == ["interrupted"]
    proc = torchrun(tmp_path, cache, f"resume={run}")
    assert proc.wait(timeout=600) == 0, proc.stderr.read()[-3000:]

    def sha256(d: Path) -> str:
        return hashlib.sha256((d / "checkpoint" / "model.safetensors").read_bytes()).hexdigest()

    assert sha256(run) == sha256(full)
