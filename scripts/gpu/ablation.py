"""The head ablation part of scripts/gpu/check.py: Vaswani et al.'s Table 3 rows (A), every row x
seed x task, planned from its own first steps and run packed on one device.

1. prep: each task's config is composed and its tokenizer and token arrays built once, here,
   so the packed jobs find them cached instead of all building the same BPE at once;
2. measure: a few training steps of every job kind (head count x task) alone: wall time, the
   device's busy time (profiler) and peak memory;
3. plan (scripts/gpu/plan.py): jobs at once and steps per job that fit the time left;
4. run: one joblib sweep per task, all at once, cut at the deadline; then `posexp report` per
   task (its figures are copied next to report.md) and the realized figures beside the plan's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from scripts.gpu.common import ROOT, Check, steady_rate
from scripts.gpu.plan import TASKS, Assumptions, Kind, Measurement, Plan, plan, render_plan

# Each task's preset: the same network (d_model 512, 6 layers, BPE 4096, sinusoidal) as a
# language model on both editions' text (PPL), and on the verse pairs (BLEU, target PPL).
TASK_ARGS = {
    "lm": ("experiment=head_ablation", "data=wyc2kjv_text"),
    "mt": ("experiment=head_ablation",),
}
REPORT_RESERVE_S = 40.0  # kept after the sweeps: two `posexp report`s and this part's reading


def overrides(c: Check, task: str, heads: int | str, seed: int | str) -> list[str]:
    """The `posexp train` overrides of one task's jobs (the preset's sweep replaced by ours)."""
    s = c.sizes
    return [
        *TASK_ARGS[task],
        # The preset sweeps heads then seeds; ours lists seeds first, so the first jobs to run
        # are every head count of seed 0 (a sweep cut short keeps whole rows).
        "~hydra.sweeper.params.heads",
        "~hydra.sweeper.params.seed",
        f"seed={seed}",
        f"heads={heads}",
        "train.threads=1",  # the GPU does the work; a core per job feeds it
        f"train.deterministic={str(c.deterministic).lower()}",
        *s.ablation_args,
        f"device={s.device}",
    ]


def compose(c: Check, task: str, heads: int) -> Any:
    """One job's RunConfig, composed in this process as `posexp train` would."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from posexp.config import from_composed
    from posexp.config.paths import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = hydra_compose("train", [*overrides(c, task, heads, 0), f"cache_dir={c.cache}"])
    return from_composed(cfg)


def prep(c: Check, heads: tuple[int, ...]) -> dict[str, tuple[Any, int]]:
    """Each task's config and vocabulary size, its tokenizer and token arrays now cached."""
    from posexp.runtime.build import build_data

    out = {}
    for task in TASKS:
        run = compose(c, task, heads[0])
        out[task] = (run, build_data(run).tokenizer.vocab_size)
    return out


def device_busy_s(step: Any, steps: int) -> float | None:
    """Seconds per step the GPU runs kernels (profiler), None where nothing was recorded."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return us / 1e6 / steps if us else None


def time_kind(run: Any, vocab: int, heads: int, device: torch.device, steps: int) -> Kind:
    """A job kind's training step alone: wall time, device-busy time, peak memory (GiB)."""
    from posexp.model import GPT
    from posexp.runtime.budget import step_memory
    from posexp.runtime.build import model_config
    from posexp.runtime.optim import build_optimizer
    from posexp.runtime.precision import autocast as precision_autocast

    cuda = device.type == "cuda"
    mcfg = dataclasses.replace(model_config(run, vocab), n_heads=heads)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = GPT(mcfg).to(device)
    opt = build_optimizer(model, run.train, device)
    bf16 = cuda and torch.cuda.is_bf16_supported()
    autocast = precision_autocast("bf16" if bf16 else "fp32", device)
    x = torch.randint(0, vocab, (run.train.batch_size, run.train.seq_len), device=device)

    def step() -> None:
        with autocast():
            loss = model(x, x)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.train.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up: kernels chosen and loaded, allocator filled
        step()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    step_s = (time.perf_counter() - start) / steps
    if cuda:
        busy = device_busy_s(step, 3)
        # No kernel recorded: assume the device busy all the step (no gain from packing).
        gpu_s = min(busy, step_s) if busy else step_s
        mem = torch.cuda.max_memory_reserved(device) / 2**30
    else:  # the CPU is the device and the host at once: the cores bound the packing
        gpu_s = 0.0
        mem = step_memory(mcfg, model.num_params(), x.shape[0], x.shape[1], False) / 2**30
    return Kind(heads, run_task(run), step_s, gpu_s, mem)


def run_task(run: Any) -> str:
    """lm or mt, from a composed config's data."""
    return "mt" if run.data.name == "wyc2kjv" else "lm"


def machine_memory_gib(device: torch.device) -> float:
    """The device's whole memory (the RAM free now on the CPU)."""
    from posexp.runtime.hardware import available_memory

    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 2**30
    return (available_memory("cpu") or 2**31) / 2**30


def measured_packing(c: Check) -> dict[int, float]:
    """The packing part's speed-ups if it ran in this call, else the H200's recorded ones
    (on the CPU: none, the cores bound it)."""
    from scripts.gpu.plan import H200_PACKING

    part = c.report["parts"].get("packing", {})
    if part.get("status") == "ok":
        return {r["jobs"]: r["vs_one_job"] for r in part["result"]["rows"]}
    return dict(H200_PACKING) if c.sizes.device == "cuda" else {1: 1.0}


def measure(c: Check) -> tuple[Measurement, dict[str, tuple[Any, int]]]:
    """Prep, then every kind's steps: the plan's measurement."""
    from posexp.runtime.device import set_deterministic
    from posexp.runtime.hardware import usable_cores

    start = time.perf_counter()
    s = c.sizes
    cfgs = prep(c, s.ablation_heads)
    device = torch.device(s.device)
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    set_deterministic(c.deterministic)  # the jobs' kernels, so their step times
    try:
        kinds = tuple(
            time_kind(run, vocab, h, device, s.ablation_probe_steps)
            for run, vocab in cfgs.values()
            for h in s.ablation_heads
        )
    finally:  # this process's later parts and subprocesses as they were
        set_deterministic(False)
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    m = Measurement(
        device=name,
        mem_gib=machine_memory_gib(device),
        cores=usable_cores(),
        kinds=kinds,
        packing=measured_packing(c),
        prep_s=time.perf_counter() - start,
    )
    return m, cfgs


def assumptions(c: Check, extra: list[str] | None = None) -> Assumptions:
    """The plan's assumptions at this run's sizes, with ``--assume`` pairs applied."""
    s = c.sizes
    base = Assumptions(min_steps=s.ablation_min_steps, max_steps=s.ablation_max_steps)
    return base.with_overrides(extra or [])


def sweep_command(c: Check, task: str, p: Plan, sweep: Path) -> list[str]:
    """The `posexp train -m` of one task's jobs, as the plan sizes them."""
    s = c.sizes
    steps = p.steps[task]
    return [
        sys.executable,
        "-m",
        "posexp",
        "train",
        "-m",
        *overrides(
            c, task, ",".join(map(str, s.ablation_heads)), ",".join(map(str, s.ablation_seeds))
        ),
        "hydra/launcher=joblib",
        f"hydra.launcher.n_jobs={p.slots[task]}",
        f"placement.jobs_per_gpu={p.in_flight}",  # all on one device, as planned
        f"train.max_steps={steps}",
        f"train.eval_interval={steps}",
        f"train.checkpoint_interval={steps}",
        f"train.warmup_steps={max(1, min(400, steps // 10))}",
        f"hydra.sweep.dir={sweep}",
    ]


def run_sweeps(c: Check, p: Plan, root: Path) -> tuple[float, list[str]]:
    """Both tasks' sweeps at once, cut at the deadline; their wall time and what was cut."""
    env = c.env(CUDA_VISIBLE_DEVICES="0") if c.sizes.device == "cuda" else c.env()
    procs = {}
    start = time.perf_counter()
    for task in p.slots:
        sweep = root / task
        sweep.mkdir(parents=True)
        with open(root / f"{task}.log", "w") as log:  # a file: a full pipe would stall a sweep
            procs[task] = subprocess.Popen(
                sweep_command(c, task, p, sweep),
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    cut = []
    for task, proc in procs.items():
        try:
            proc.wait(timeout=max(c.left() - REPORT_RESERVE_S, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            cut.append(task)
    return time.perf_counter() - start, cut


def _iso_s(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp).timestamp() if stamp else None


def job_row(task: str, job: Path) -> dict[str, Any] | None:
    """One finished job's figures (None: it wrote no results)."""
    results = job / "results.json"
    if not results.exists():
        return None
    r = json.loads(results.read_text())
    cfg = json.loads((job / "checkpoint" / "meta.json").read_text())["config"]
    session = json.loads((job / "provenance.json").read_text())["sessions"][-1]
    started, ended = _iso_s(session.get("started")), _iso_s(session.get("ended"))
    step_s = cfg["train"]["batch_size"] * cfg["train"]["seq_len"] / steady_rate(job)
    wall = ended - started if started and ended else math.nan
    return {
        "task": task,
        "heads": cfg["heads"],
        "seed": cfg["seed"],
        "status": r.get("status"),
        "steps": r.get("step"),
        "ppl": r.get("final/val_ppl"),
        "bleu": r.get("final/bleu"),
        "chrf": r.get("final/chrf"),
        "copy_bleu": r.get("final/copy_bleu"),
        "deterministic": session.get("deterministic"),
        "step_seconds_packed": step_s,
        "wall_seconds": wall,
        # What the job spent outside its steps: start-up, evaluations, test BLEU (provenance's
        # times are whole seconds: a toy run's may read as zero).
        "overhead_seconds": max(wall - r.get("step", 0) * step_s, 0.0),
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample std over seeds per task and head count: the table of the ablation."""
    out = []
    for task, heads in sorted({(r["task"], r["heads"]) for r in rows}):
        mine = [r for r in rows if (r["task"], r["heads"]) == (task, heads)]
        entry: dict[str, Any] = {"task": task, "heads": heads, "n": len(mine)}
        for key in ("ppl", "bleu", "chrf"):
            vals = [r[key] for r in mine if r[key] is not None]
            entry[key] = statistics.mean(vals) if vals else None
            entry[f"{key}_std"] = statistics.stdev(vals) if len(vals) > 1 else None
        out.append(entry)
    return out


def copy_report(sweep: Path, out: Path, task: str) -> list[str]:
    """The report's markdown, CSVs and figures, into OUT/head_ablation/<task>/ next to
    gpu_check's report; their paths relative to OUT."""
    dest = out / "head_ablation" / task
    dest.mkdir(parents=True, exist_ok=True)
    names = sorted(
        {f.name for pattern in ("report*", "*.png", "*.csv") for f in sweep.glob(pattern)}
    )
    for name in names:
        shutil.copy2(sweep / name, dest / name)
    return [str((dest / name).relative_to(out)) for name in names]


def part_ablation(c: Check) -> dict[str, Any]:
    """experiment=head_ablation's rows (A): measured, planned, run packed; reported per task."""
    s = c.sizes
    m, _ = measure(c)
    p = plan(
        m,
        c.left() - REPORT_RESERVE_S,
        list(s.ablation_heads),
        list(s.ablation_seeds),
        assumptions(c, c.assume),
    )
    text = render_plan(p)
    print(text, file=sys.stderr, flush=True)
    root = c.fresh("head_ablation")
    wall, cut = run_sweeps(c, p, root)
    rows = [
        row
        for task in p.slots
        for job in sorted((root / task).iterdir())
        if job.is_dir() and (row := job_row(task, job)) is not None
    ]
    reports = {}
    for task in p.slots:
        if any(r["task"] == task for r in rows) and c.left() > 5:
            c.posexp("report", str(root / task), "--no-eval", f"--device={s.device}")
            reports[task] = copy_report(root / task, c.out, task)
    expected = len(p.jobs)
    done = [r for r in rows if r["status"] == "completed"]
    overhead = {
        t: statistics.median(r["overhead_seconds"] for r in done if r["task"] == t)
        for t in p.slots
        if any(r["task"] == t for r in done)
    }
    packed = [r["step_seconds_packed"] for r in done]
    result = {
        "deterministic": c.deterministic,
        "plan": p.to_dict(),
        "plan_text": text,
        "sweep_seconds": wall,
        "planned_seconds": p.end_s,
        "step_seconds_packed": statistics.median(packed) if packed else None,
        "overhead_seconds": overhead,
        "cut_at_deadline": cut,
        "completed": len(done),
        "expected": expected,
        "rows": sorted(rows, key=lambda r: (r["task"], r["heads"], r["seed"])),
        "table": summarize(done),
        "reports": reports,
    }
    if len(done) < expected:
        result["incomplete"] = f"{len(done)} of {expected} jobs completed" + (
            f"; cut at the deadline: {', '.join(cut)}" if cut else ""
        )
    return result
