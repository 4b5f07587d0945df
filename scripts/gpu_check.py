"""Every GPU claim of the docs (docs/performance.md), measured in one command; writes outputs/gpu_check/report.{md,json}.

    python scripts/gpu_check.py              # on a CUDA machine: about 10 minutes on one H200
    python scripts/gpu_check.py --smoke      # every part at toy size on the CPU (CI runs this)

Parts, in order (each one's failure is recorded and the others still run; exit 1 if any failed):

1. train: tokens/s and MFU of model=base (d_model 768, 12 layers, 12 heads, seq 1024) with bf16
   autocast, fused AdamW and torch.compile, against the bf16 matmul rate measured in the same
   run; the SDPA kernel that ran, read from the profiler (cuDNN's on an H200 with torch 2.11).
2. eval: `eval-extrapolate`'s forward pass (scripts/bench_eval.py, one fresh process per point):
   tokens/s and peak GPU memory at 4096 and 16384 tokens for rope, alibi and t5.
   The bias PEs run through FlexAttention and through the chunked SDPA path, side by side.
3. flex: FlexAttention's logits, gradients and cached generation against SDPA with an explicit
   bias, for every bias PE (scripts/flex_parity.py).
4. packing: N tiny jobs sharing one GPU through the joblib launcher with
   placement.jobs_per_gpu=N (N = 1, 4, 8): aggregate tokens/s against one job.
5. torchrun: `torchrun --nproc_per_node=<GPUs>` training (NCCL with 2+ GPUs), killed after its
   middle checkpoint and resumed, against the same run uninterrupted.
6. head ablation: experiment=head_ablation's model at full size, all head counts packed on one
   GPU at once, for the steps that fit the time left; BLEU (beam 4), chrF and PPL per head count
   beside the copy baseline, the time per step, and the projected wall time of the full preset.

Ratios are always against a baseline measured in the same run. With --smoke every part runs at
toy size on the CPU (gloo for torchrun), so the script cannot rot unseen.
"""

from __future__ import annotations

import argparse
import json
import math
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

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
sys.path[:0] = [str(SCRIPTS), str(ROOT)]

import torch  # noqa: E402

from posexp.files import write_json_atomic, write_text_atomic  # noqa: E402


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
    ablation_args: tuple[str, ...]
    ablation_heads: tuple[int, ...]


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
    ablation_args=(),
    ablation_heads=(1, 2, 4, 8, 16, 32),
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
)


class Check:
    """Shared state: sizes, output dir, deadline, and the report being built."""

    def __init__(
        self, sizes: Sizes, out: Path, budget_s: float, smoke: bool, work: Path | None = None
    ) -> None:
        self.sizes, self.out, self.smoke = sizes, out, smoke
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


# ---- parts ------------------------------------------------------------------------------------


def sdpa_kernel_used(model: torch.nn.Module, x: torch.Tensor, autocast: Any) -> str:
    """The SDPA implementation one forward + backward actually called, from the profiler."""
    from torch.profiler import profile

    with profile() as prof:
        with autocast():
            loss = model(x, x)["loss"]
        loss.backward()
    names = {e.key for e in prof.key_averages()}
    found = sorted(
        n.removeprefix("aten::_scaled_dot_product_")
        for n in names
        if n.startswith("aten::_scaled_dot_product_") and "backward" not in n
    )
    model.zero_grad(set_to_none=True)
    return ", ".join(found) or "none found"


def part_train(c: Check) -> dict[str, Any]:
    """Training throughput and MFU of model=base (bench_train's bare step, compiled)."""
    import contextlib

    from bench_train import bare_step_rate, flops_per_token, matmul_rate

    from posexp.model import GPT, ModelConfig

    s = c.sizes
    device = torch.device(s.device)
    d_model, layers, heads = s.train_model
    cfg = ModelConfig(
        vocab_size=260,
        d_model=d_model,
        n_layers=layers,
        n_heads=heads,
        pe="rope",
        train_length=s.train_seq,
    )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = matmul_rate(device, dtype, n=s.matmul_n, seconds=2.0 if not c.smoke else 0.2)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    rate, model = bare_step_rate(cfg, s.train_batch, s.train_seq, device, s.train_steps, s.compile)
    wall = time.perf_counter() - start
    autocast = (
        (lambda: torch.autocast("cuda", dtype=torch.bfloat16))
        if device.type == "cuda"
        else contextlib.nullcontext
    )
    probe = GPT(cfg).to(device)
    kernel = sdpa_kernel_used(
        probe, torch.randint(0, 260, (2, s.train_seq), device=device), autocast
    )
    fpt = flops_per_token(model, cfg, s.train_seq)
    return {
        "config": f"d_model {d_model}, {layers} layers, {heads} heads, seq {s.train_seq}, batch "
        f"{s.train_batch}, rope, {'bf16 autocast' if device.type == 'cuda' else 'fp32'}, "
        f"{'fused AdamW' if device.type == 'cuda' else 'AdamW'}, compile {s.compile}",
        "tokens_per_s": rate,
        "matmul_flops": peak,
        "model_flops_per_token": fpt,
        "mfu": rate * fpt / peak,
        "sdpa_kernel": kernel,
        "seconds_incl_compile": wall,
        "peak_memory_gib": (
            torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
        ),
    }


def part_eval(c: Check) -> dict[str, Any]:
    """Forward-pass tokens/s and memory at long lengths: rope, the bias PEs through
    FlexAttention and through the chunked SDPA path, and the training-free methods that remap
    positions (bench_eval's points)."""
    from bench_eval import measure

    s = c.sizes
    args = argparse.Namespace(
        model=s.eval_model,
        heads=8 if not c.smoke else 2,
        device=s.device,
        reps=3 if not c.smoke else 1,
        train_length=1024,  # L0 of the training-free methods' variants
    )
    variants = (
        ("rope", "alibi:flex")
        if c.smoke
        else (
            "rope",
            "alibi:flex",
            "alibi:sdpa",
            "t5:flex",
            "t5:sdpa",
            "fire:flex",
            "fire:sdpa",
            "rope+self_extend",
            "rope+rerope",
        )
    )
    rows = [measure(args, pe, length) for pe in variants for length in s.eval_lengths]
    for r in rows:
        rope = next(x for x in rows if x["pe"] == "rope" and x["length"] == r["length"])
        r["speed_vs_rope"] = r["tok_s"] / rope["tok_s"]
    return {"config": f"model={s.eval_model}, batch 1, {s.device}", "rows": rows}


def part_packing(c: Check) -> dict[str, Any]:
    """N tiny jobs on one GPU (joblib, placement.jobs_per_gpu=N): aggregate tokens/s vs one job."""
    s = c.sizes
    rows = []
    for n in s.pack_counts:
        sweep = c.fresh(f"packing_{n}")
        seeds = ",".join(str(i) for i in range(n))
        start = time.perf_counter()
        c.posexp(
            "train",
            "-m",
            "hydra/launcher=joblib",
            f"hydra.launcher.n_jobs={n}",
            f"placement.jobs_per_gpu={n}",
            f"seed={seeds}",
            *s.pack_args,
            f"device={s.device}",
            f"hydra.sweep.dir={sweep}",
            env=c.env(CUDA_VISIBLE_DEVICES="0") if s.device == "cuda" else None,
        )
        wall = time.perf_counter() - start
        per_job = [steady_rate(d) for d in sorted(sweep.iterdir()) if (d / "results.json").exists()]
        if len(per_job) != n:
            raise RuntimeError(f"packing N={n}: {len(per_job)} of {n} jobs finished")
        rows.append(
            {
                "jobs": n,
                "aggregate_tokens_per_s": sum(per_job),
                "per_job_tokens_per_s": statistics.median(per_job),
                "sweep_seconds": wall,
            }
        )
    base = rows[0]["aggregate_tokens_per_s"]
    for r in rows:
        r["vs_one_job"] = r["aggregate_tokens_per_s"] / base
    return {"config": " ".join(s.pack_args), "rows": rows}


def torchrun(c: Check, procs: int, *args: str) -> subprocess.Popen:
    """Start `torchrun --standalone --nproc_per_node=procs -m posexp train ARGS` in its own group."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={procs}",
        "-m",
        "posexp",
        "train",
        *args,
    ]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=c.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _weights_diff(a: Path, b: Path) -> float:
    """Largest absolute difference between two runs' final weights."""
    from safetensors.torch import load_file

    wa = load_file(str(a / "checkpoint" / "model.safetensors"))
    wb = load_file(str(b / "checkpoint" / "model.safetensors"))
    return max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)


def part_torchrun(c: Check) -> dict[str, Any]:
    """DDP training killed after its middle checkpoint and resumed, against an uninterrupted run;
    a second uninterrupted run measures what the device's own nondeterminism contributes."""
    s = c.sizes
    procs = s.ddp_procs or max(torch.cuda.device_count(), 1)
    args = (*s.ddp_args, f"device={s.device}")
    steps = int(next(a for a in args if a.startswith("train.max_steps=")).split("=")[1])
    full, repeat, killed = c.fresh("ddp_full"), c.fresh("ddp_repeat"), c.fresh("ddp_killed")
    for run_dir in (full, repeat) if s.ddp_repeat else (full,):
        proc = torchrun(c, procs, *args, f"hydra.run.dir={run_dir}")
        _, err = proc.communicate(timeout=max(c.left(), 60))
        if proc.returncode != 0:
            raise RuntimeError(f"torchrun exited {proc.returncode}: {err.strip()[-800:]}")
    proc = torchrun(c, procs, *args, f"hydra.run.dir={killed}")
    for line in proc.stderr:  # kill the whole job right after its middle checkpoint
        if f"checkpoint saved at step {steps // 2}" in line:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    proc = torchrun(c, procs, f"resume={killed}", f"device={s.device}")
    _, err = proc.communicate(timeout=max(c.left(), 60))
    if proc.returncode != 0:
        raise RuntimeError(f"resume exited {proc.returncode}: {err.strip()[-800:]}")
    a, b = (scalars(d, "train/loss") for d in (full, killed))
    if sorted(a) != sorted(b):
        raise RuntimeError(f"logged steps differ: {sorted(a)} vs {sorted(b)}")
    weight_diff = _weights_diff(full, killed)
    result = {
        "processes": procs,
        "backend": "nccl"
        if s.device == "cuda" and procs > 1
        else ("gloo" if procs > 1 else "none (one process: no process group)"),
        "steps": steps,
        "killed_after_step": steps // 2,
        "max_loss_diff": max(abs(a[k] - b[k]) for k in a),
        "max_weight_diff": weight_diff,
        "bitwise_equal_weights": weight_diff == 0.0,
    }
    if s.ddp_repeat:  # two uninterrupted runs: a resume cannot be held to more than this
        r = scalars(repeat, "train/loss")
        result["repeat_max_loss_diff"] = max(abs(a[k] - r[k]) for k in a)
        result["repeat_max_weight_diff"] = _weights_diff(full, repeat)
    return result


def ablation_steps(c: Check, heads: tuple[int, ...]) -> tuple[int, float]:
    """Steps per job that fit the time left (all head counts at once), and one step's seconds."""
    if c.smoke:
        return 4, math.nan
    from bench_train import bare_step_rate

    from posexp.model import ModelConfig

    cfg = ModelConfig(
        vocab_size=4096, d_model=512, n_layers=6, n_heads=8, pe="sinusoidal", train_length=256
    )
    rate, _ = bare_step_rate(cfg, 64, 256, torch.device("cuda"), 5, False)
    step_s = 64 * 256 / rate
    # Jobs share the GPU, so together they step about len(heads) times slower. On one H200,
    # 335 steps with 99 s left did not finish: start-up, the BPE tokenizer, evaluations and the
    # beam-search test BLEU need more than a third, so 150 s are kept for them and half the rest.
    budget = max(c.left() - 150, 60) / 2
    return max(50, min(6000, int(budget / (step_s * len(heads))))), step_s


def part_ablation(c: Check) -> dict[str, Any]:
    """experiment=head_ablation at full model size, every head count packed on one GPU."""
    s = c.sizes
    heads = s.ablation_heads
    steps, alone_step_s = ablation_steps(c, heads)
    sweep = c.fresh("head_ablation")
    start = time.perf_counter()
    c.posexp(
        "train",
        "-m",
        "experiment=head_ablation",
        "hydra/launcher=joblib",
        f"hydra.launcher.n_jobs={len(heads)}",
        f"placement.jobs_per_gpu={len(heads)}",
        f"heads={','.join(map(str, heads))}",
        "seed=0",
        f"train.max_steps={steps}",
        f"train.eval_interval={steps}",
        f"train.checkpoint_interval={steps}",
        f"train.warmup_steps={max(1, min(400, steps // 10))}",
        *s.ablation_args,
        f"device={s.device}",
        f"hydra.sweep.dir={sweep}",
        env=c.env(CUDA_VISIBLE_DEVICES="0") if s.device == "cuda" else None,
    )
    wall = time.perf_counter() - start
    c.posexp("report", str(sweep), "--no-eval", f"--device={s.device}")
    rows = []
    for job in sorted(sweep.iterdir()):
        results = job / "results.json"
        if not results.exists():
            continue
        r = json.loads(results.read_text())
        cfg = json.loads((job / "checkpoint" / "meta.json").read_text())["config"]
        tps = steady_rate(job)
        rows.append(
            {
                "heads": cfg["heads"],
                "status": r.get("status"),
                "bleu": r.get("final/bleu"),
                "chrf": r.get("final/chrf"),
                "ppl": r.get("final/val_ppl"),
                "copy_bleu": r.get("final/copy_bleu"),
                "step_seconds_packed": cfg["train"]["batch_size"] * cfg["train"]["seq_len"] / tps,
            }
        )
    rows.sort(key=lambda r: r["heads"])
    packed = statistics.median(r["step_seconds_packed"] for r in rows)
    # The full preset: 18 jobs of 6000 steps, run len(heads) at a time as here; each wave also
    # pays what this sweep spent outside its training steps (start-up, evaluation, test BLEU).
    waves = math.ceil(18 / len(heads))
    overhead = max(wall - steps * packed, 0.0)
    projected = waves * (6000 * packed + overhead)
    return {
        "steps": steps,
        "seed": 0,
        "sweep_seconds": wall,
        "step_seconds_alone": alone_step_s,
        "step_seconds_packed": packed,
        "projected_full_preset_hours": projected / 3600,
        "rows": rows,
        "report": str(sweep / "report.md"),
    }


def part_flex(c: Check) -> dict[str, Any]:
    """FlexAttention against SDPA with an explicit bias, per bias PE (scripts/flex_parity.py)."""
    from flex_parity import flex_parity

    if c.smoke:  # one PE shows the part works; tests/test_flex.py holds every PE to SDPA
        return {"rows": flex_parity(c.sizes.device, length=150, pes=("alibi",))}
    return {"rows": flex_parity(c.sizes.device, length=300)}


PARTS = {
    "train": part_train,
    "eval": part_eval,
    "flex": part_flex,
    "packing": part_packing,
    "torchrun": part_torchrun,
    "ablation": part_ablation,
}


# ---- report -----------------------------------------------------------------------------------


def _f(v: Any, fmt: str = ",.0f") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def render_markdown(report: dict[str, Any]) -> str:
    """report.md: one section per part, numbers straight from report.json."""
    m = report["machine"]
    lines = [
        "# posexp GPU check",
        "",
        f"Machine: {m.get('gpu', 'no GPU')} × {m['gpus']}, {m['cpu_cores']} CPU cores, torch "
        f"{m['torch']}{', CUDA ' + str(m['cuda']) if m.get('cuda') else ''}"
        f"{'. SMOKE RUN: toy sizes on the CPU, not GPU figures.' if report['smoke'] else '.'}",
        "",
    ]
    parts = report["parts"]
    for name, part in parts.items():
        lines += [f"## {name}", ""]
        if part.get("status") != "ok":
            lines += [f"FAILED after {part.get('seconds', 0):.0f} s: {part.get('error')}", ""]
            continue
        r = part["result"]
        if name == "train":
            lines += [
                f"{r['config']}: **{_f(r['tokens_per_s'])} tokens/s**, MFU "
                f"**{r['mfu']:.1%}** against a measured matmul rate of "
                f"{r['matmul_flops'] / 1e12:,.1f} TFLOP/s ({_f(r['model_flops_per_token'] / 1e6, ',.1f')} "
                f"MFLOP per token). SDPA kernel that ran: `{r['sdpa_kernel']}`. Peak memory "
                f"{_f(r['peak_memory_gib'], '.1f')} GiB."
            ]
        elif name == "eval":
            lines += [
                f"{r['config']}.",
                "",
                "| pe | length | tokens/s | × rope | pass MiB | peak MiB |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {x['pe']} | {x['length']} | {_f(x['tok_s'])} | {x['speed_vs_rope']:.2f} "
                f"| {_f(x['pass_mib'], ',.1f')} | {_f(x['peak_mib'], ',.1f')} |"
                for x in r["rows"]
            ]
        elif name == "flex":
            lines += [
                "| pe | device | length | flex trains | max Δ logits | max Δ grads | generation |",
                "|---|---|---:|---|---:|---:|---|",
            ]
            lines += [
                f"| {x['pe']} | {x['device']} | {x['length']} | {x['flex_trains']} "
                f"| {x['logits_max_abs_diff']:.1e} | {_f(x.get('grad_max_abs_diff'), '.1e')} "
                f"| {'equal' if x['generation_equal'] else 'DIFFERS'} |"
                for x in r["rows"]
            ]
        elif name == "packing":
            lines += [
                "| jobs on one GPU | aggregate tokens/s | × one job | per job | sweep s |",
                "|---:|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {x['jobs']} | {_f(x['aggregate_tokens_per_s'])} | {x['vs_one_job']:.2f} "
                f"| {_f(x['per_job_tokens_per_s'])} | {x['sweep_seconds']:.0f} |"
                for x in r["rows"]
            ]
        elif name == "torchrun":
            lines += [
                f"{r['processes']} process(es), backend {r['backend']}: {r['steps']} steps, "
                f"killed after the checkpoint at step {r['killed_after_step']} and resumed. "
                f"Largest loss difference from the uninterrupted run {r['max_loss_diff']:.2e}, "
                f"largest final weight difference {r['max_weight_diff']:.2e} "
                f"({'bitwise equal' if r['bitwise_equal_weights'] else 'not bitwise equal'}). "
                + (
                    f"Two uninterrupted runs of the same config differ by up to "
                    f"{_f(r['repeat_max_loss_diff'], '.2e')} in loss and "
                    f"{_f(r['repeat_max_weight_diff'], '.2e')} in weights (the device's own "
                    f"nondeterminism: the floor for any resume)."
                    if "repeat_max_loss_diff" in r
                    else "No repeat run (smoke: one CPU repeats itself exactly)."
                )
            ]
        elif name == "ablation":
            lines += [
                f"{r['steps']} steps per head count, seed {r['seed']}, all packed on one device: "
                f"{r['sweep_seconds']:.0f} s. Step time {r['step_seconds_packed']:.3f} s packed "
                f"({_f(r['step_seconds_alone'], '.3f')} s alone). Projected full preset "
                f"(18 jobs × 6000 steps, {len(r['rows'])} at a time): "
                f"**{r['projected_full_preset_hours']:.1f} h**.",
                "",
                "| heads | BLEU (beam 4) | chrF | PPL | copy BLEU | status |",
                "|---:|---:|---:|---:|---:|---|",
            ]
            lines += [
                f"| {x['heads']} | {_f(x['bleu'], '.2f')} | {_f(x['chrf'], '.1f')} "
                f"| {_f(x['ppl'], '.2f')} | {_f(x['copy_bleu'], '.2f')} | {x['status']} |"
                for x in r["rows"]
            ]
        lines += ["", f"({part['seconds']:.0f} s)", ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Run the parts in order within the time budget; write the report after each."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--smoke", action="store_true", help="toy sizes on the CPU (for CI)")
    p.add_argument("--out", type=Path, default=ROOT / "outputs" / "gpu_check")
    p.add_argument(
        "--work", type=Path, default=None, help="scratch dir for the parts' runs (default OUT/work)"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for all parts together (default 450 on a GPU; 1800 for --smoke, whose "
        "parts share a CPU with whatever else runs)",
    )
    p.add_argument("--parts", default=",".join(PARTS), help=f"subset of {','.join(PARTS)}")
    args = p.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        print("error: no CUDA GPU here; run with --smoke for the CPU check", file=sys.stderr)
        return 2
    chosen = [x for x in args.parts.split(",") if x]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        print(f"error: unknown part {unknown[0]!r}; allowed: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    budget = args.budget if args.budget is not None else (1800 if args.smoke else 450)
    check = Check(SMOKE if args.smoke else FULL, args.out, budget, args.smoke, args.work)
    if args.smoke:
        torch.set_num_threads(1)
    failed = 0
    for name in chosen:
        start = time.perf_counter()
        print(f"[gpu_check] {name} …", file=sys.stderr, flush=True)
        try:
            entry = {"status": "ok", "result": PARTS[name](check)}
        except Exception as e:  # one part's failure must not lose the others' figures
            entry = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
            failed += 1
        entry["seconds"] = time.perf_counter() - start
        check.report["parts"][name] = entry
        check.save()
        print(
            f"[gpu_check] {name}: {entry['status']} in {entry['seconds']:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    print(f"report: {args.out / 'report.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
