"""What every part of scripts/gpu/check.py shares: the sizes it runs at, the run's state, and
reading a run's TensorBoard log."""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posexp.store.files import write_json_atomic, write_text_atomic
from scripts.bench_common import ROOT
from scripts.gpu.report import render_markdown


@dataclass(frozen=True)
class Sizes:
    """What each part runs: the real sizes on a GPU, toy ones on the CPU for --smoke."""

    device: str
    train_model: tuple[int, int, int]  # d_model, layers, heads
    train_seq: int
    train_batch: int
    train_steps: int  # timed steps per block (median of 5 blocks)
    compile: bool
    matmul_n: int
    eval_model: str
    eval_lengths: tuple[int, ...]
    pack_counts: tuple[int, ...]
    pack_args: tuple[str, ...]
    ddp_procs: int
    ddp_args: tuple[str, ...]
    ddp_repeat: bool  # a second uninterrupted run: the device's own nondeterminism
    det_args: tuple[str, ...]  # the deterministic part's run: killed halfway and resumed
    ablation_args: tuple[str, ...]  # every ablation job's, after its task's (TASK_ARGS)
    ablation_heads: tuple[int, ...]
    ablation_seeds: tuple[int, ...]
    ablation_probe_steps: int  # timed steps per job kind for the plan
    ablation_min_steps: int
    ablation_max_steps: int


TINY_RUN = ("model=tiny", "heads=2", "train.log_interval=5", "data=kjv", "tokenizer=byte")
FULL = Sizes(
    device="cuda",
    train_model=(768, 12, 12),
    train_seq=1024,
    train_batch=16,
    train_steps=10,
    compile=True,
    matmul_n=8192,
    eval_model="small",
    eval_lengths=(4096, 16384),
    pack_counts=(1, 4, 8),
    pack_args=(
        *TINY_RUN,
        "train.max_steps=1500",
        "train.batch_size=32",
        "train.seq_len=256",
        "train.eval_interval=1500",
        "train.checkpoint_interval=1500",
    ),
    ddp_procs=0,  # = the number of GPUs
    ddp_args=(
        *TINY_RUN,
        "train.max_steps=200",
        "train.batch_size=32",
        "train.seq_len=256",
        "train.eval_interval=100",
        "train.checkpoint_interval=100",
    ),
    ddp_repeat=True,
    # The ablation's own model and batch (the LM task), so its cost is the ablation's.
    det_args=(
        "experiment=head_ablation",
        "data=wyc2kjv_text",
        "heads=8",
        "train.max_steps=200",
        "train.eval_interval=100",
        "train.checkpoint_interval=100",
        "train.log_interval=10",
        "train.warmup_steps=20",
    ),
    # 400 evenly spaced test verses, as the CPU preset (the whole test split would take the
    # beam search minutes per job; the first GPU session's cut-off run paid for that).
    ablation_args=("translate.test_examples=400",),
    ablation_heads=(1, 4, 16, 32),  # Vaswani et al.'s rows (A); 8 is their base model
    ablation_seeds=(0, 1, 2),
    ablation_probe_steps=10,
    ablation_min_steps=100,
    ablation_max_steps=6000,
)
SMOKE = Sizes(
    device="cpu",
    train_model=(64, 2, 2),
    train_seq=64,
    train_batch=4,
    train_steps=2,
    compile=False,
    matmul_n=256,
    eval_model="tiny",
    eval_lengths=(64,),
    pack_counts=(1, 2),
    pack_args=(
        *TINY_RUN,
        "train.max_steps=10",
        "train.batch_size=4",
        "train.seq_len=32",
        "train.eval_interval=10",
        "train.checkpoint_interval=10",
        "train.eval_tokens=256",
        "train.threads=1",
    ),
    ddp_procs=2,
    ddp_args=(
        *TINY_RUN,
        "train.max_steps=6",
        "train.batch_size=4",
        "train.seq_len=32",
        "train.eval_interval=3",
        "train.checkpoint_interval=3",
        "train.eval_tokens=256",
    ),
    # gloo on one CPU repeats itself exactly (the resume is held to 1e-5 either way), so the
    # smoke run skips the repeat: a torchrun of two processes, the largest cost of the check.
    ddp_repeat=False,
    det_args=(
        *TINY_RUN,
        "train.max_steps=6",
        "train.batch_size=4",
        "train.seq_len=32",
        "train.eval_interval=3",
        "train.checkpoint_interval=3",
        "train.log_interval=1",
        "train.eval_tokens=256",
        "train.threads=1",
    ),
    ablation_args=(
        "tokenizer.vocab_size=300",
        "model.d_model=32",
        "model.n_layers=1",
        "train.batch_size=4",
        "train.seq_len=96",
        "translate.bleu_examples=4",
        "translate.test_examples=8",
        "translate.max_new_tokens=8",
        "train.threads=1",
    ),
    ablation_heads=(1, 2),
    ablation_seeds=(0,),
    ablation_probe_steps=2,
    ablation_min_steps=2,
    ablation_max_steps=4,
)


class Check:
    """Shared state: sizes, output dir, deadline, and the report being built."""

    def __init__(
        self,
        sizes: Sizes,
        out: Path,
        budget_s: float,
        smoke: bool,
        work: Path | None = None,
        deterministic: bool = False,
    ) -> None:
        self.sizes, self.out, self.smoke = sizes, out, smoke
        self.deterministic = deterministic  # train.deterministic of the ablation's jobs
        self.assume: list[str] = []  # KEY=VALUE changes to the ablation plan's assumptions
        self.flex_pes: tuple[str, ...] | None = None  # the flex part's encodings (None: all)
        self.deadline = time.monotonic() + budget_s
        self.work = work or out / "work"
        # The smoke run keeps its token caches to itself; a real run shares the user's.
        self.cache = self.work / ".cache" if smoke else ROOT / "outputs" / ".cache"
        self.report: dict[str, Any] = {"machine": machine(), "smoke": smoke, "parts": {}}

    def fresh(self, name: str) -> Path:
        """An empty work dir for one part (a rerun must not read an earlier run's jobs)."""
        path = self.work / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    def left(self) -> float:
        """Seconds left before the deadline."""
        return self.deadline - time.monotonic()

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for posexp subprocesses."""
        env = {
            **os.environ,
            "POSEXP_CACHE": str(self.cache),
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(
                x for x in (str(ROOT), os.environ.get("PYTHONPATH", "")) if x
            ),
            **extra,
        }
        if self.smoke:
            env["OMP_NUM_THREADS"] = "1"
        return env

    def posexp(
        self, *args: str, env: dict[str, str] | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess:
        """Run `python -m posexp ARGS`; raise with its stderr tail if it fails."""
        proc = subprocess.run(
            [sys.executable, "-m", "posexp", *args],
            cwd=ROOT,
            text=True,
            env=env or self.env(),
            capture_output=True,
            timeout=timeout or max(self.left(), 30),
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"posexp {' '.join(args[:3])} … exited {proc.returncode}: "
                f"{proc.stderr.strip()[-800:]}"
            )
        return proc

    def save(self) -> None:
        """Write report.json and report.md (after every part, so a cut-off run keeps its figures)."""
        self.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.out / "report.json", self.report)
        write_text_atomic(self.out / "report.md", render_markdown(self.report))


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "gpus": torch.cuda.device_count(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def scalars(run_dir: Path, tag: str) -> dict[int, float]:
    """A TensorBoard scalar of a run dir, step -> value."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    return {e.step: e.value for e in events.Scalars(tag)} if tag in events.Tags()["scalars"] else {}


def steady_rate(run_dir: Path) -> float:
    """Median logged tokens/s, the first (warm-up) and last (eval, checkpoint) windows dropped."""
    rates = list(scalars(run_dir, "train/tokens_per_s").values())
    return statistics.median(rates[1:-1] or rates)


def weights_diff(a: Path, b: Path) -> float:
    """Largest absolute difference between two runs' final weights."""
    from safetensors.torch import load_file

    wa = load_file(str(a / "checkpoint" / "model.safetensors"))
    wb = load_file(str(b / "checkpoint" / "model.safetensors"))
    return max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)


def kill_after_checkpoint(proc: subprocess.Popen, step: int) -> None:
    """SIGKILL ``proc``'s whole group right after it logs its checkpoint at ``step``."""
    for line in proc.stderr:
        if f"checkpoint saved at step {step}" in line:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
