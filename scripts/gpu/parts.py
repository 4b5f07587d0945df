"""The parts of scripts/gpu/check.py that measure the training and evaluation claims: train,
eval, flex, packing, torchrun, deterministic (the head ablation is scripts/gpu/ablation.py)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from scripts.gpu.common import (
    ROOT,
    Check,
    kill_after_checkpoint,
    scalars,
    steady_rate,
    weights_diff,
)


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

    from posexp.model import GPT, ModelConfig
    from scripts.bench_train import bare_step_rate, flops_per_token, matmul_rate

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
    from scripts.bench_eval import measure

    s = c.sizes
    args = argparse.Namespace(
        model=s.eval_model,
        heads=8 if not c.smoke else 2,
        device=s.device,
        reps=3 if not c.smoke else 1,
        train_length=1024,  # L0 of the training-free methods' variants
        precision="fp32",
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
    kill_after_checkpoint(proc, steps // 2)  # the whole job, right after its middle checkpoint
    proc = torchrun(c, procs, f"resume={killed}", f"device={s.device}")
    _, err = proc.communicate(timeout=max(c.left(), 60))
    if proc.returncode != 0:
        raise RuntimeError(f"resume exited {proc.returncode}: {err.strip()[-800:]}")
    a, b = (scalars(d, "train/loss") for d in (full, killed))
    if sorted(a) != sorted(b):
        raise RuntimeError(f"logged steps differ: {sorted(a)} vs {sorted(b)}")
    weight_diff = weights_diff(full, killed)
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
        result["repeat_max_weight_diff"] = weights_diff(full, repeat)
    return result


def part_flex(c: Check) -> dict[str, Any]:
    """FlexAttention against SDPA with an explicit bias, per bias PE and for FoX (gradients and
    step times where flex trains), and FoX's forget-gate kernel alone (scripts/flex_parity.py)."""
    from scripts.flex_parity import flex_parity, gate_parity

    if c.smoke:  # one PE per kernel kind shows the part works; tests hold every PE to SDPA
        rows = flex_parity(c.sizes.device, length=150, pes=c.flex_pes or ("alibi", "fox"))
        return {"rows": [*rows, gate_parity(c.sizes.device, length=150)]}
    rows = flex_parity(c.sizes.device, length=300, pes=c.flex_pes)
    return {"rows": [*rows, gate_parity(c.sizes.device, 300)]}


def posexp_popen(c: Check, *args: str) -> subprocess.Popen:
    """Start `python -m posexp train ARGS` in its own process group, its log on a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "posexp", "train", *args],
        cwd=ROOT,
        env=c.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def part_deterministic(c: Check) -> dict[str, Any]:
    """train.deterministic=true: a run killed after its middle checkpoint and resumed against
    the same run uninterrupted (bitwise?), and its tokens/s against train.deterministic=false."""
    s = c.sizes
    args = (*s.det_args, f"device={s.device}")
    steps = int(next(a for a in args if a.startswith("train.max_steps=")).split("=")[1])
    free, full, killed = c.fresh("det_off"), c.fresh("det_full"), c.fresh("det_killed")
    for run_dir, on in ((free, "false"), (full, "true")):
        c.posexp("train", *args, f"train.deterministic={on}", f"hydra.run.dir={run_dir}")
    on = (*args, "train.deterministic=true")
    kill_after_checkpoint(posexp_popen(c, *on, f"hydra.run.dir={killed}"), steps // 2)
    c.posexp("train", f"resume={killed}", f"device={s.device}")
    a, b = (scalars(d, "train/loss") for d in (full, killed))
    if sorted(a) != sorted(b):
        raise RuntimeError(f"logged steps differ: {sorted(a)} vs {sorted(b)}")
    weight_diff = weights_diff(full, killed)
    rate_off, rate_on = steady_rate(free), steady_rate(full)
    return {
        "config": " ".join(args),
        "steps": steps,
        "killed_after_step": steps // 2,
        "max_loss_diff": max(abs(a[k] - b[k]) for k in a),
        "max_weight_diff": weight_diff,
        "bitwise_equal_weights": weight_diff == 0.0,
        "tokens_per_s_off": rate_off,
        "tokens_per_s_on": rate_on,
        "on_vs_off": rate_on / rate_off,
        "off_vs_on_weight_diff": weights_diff(free, full),
    }
