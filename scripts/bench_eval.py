"""Evaluation speed and memory by length: RoPE's SDPA against the bias PEs (ALiBi, T5, FIRE, ...)
and FoX through posexp's CPU kernel (``auto``), FlexAttention (``:flex``) and the chunked
SDPA-with-bias path (``:sdpa``), and against the training-free extension methods (Self-Extend,
ReRoPE, log scaling), side by side in one run.

    python -m scripts.bench_eval                         # small model, 1024..4096, CPU
    python -m scripts.bench_eval --device cuda --lengths 1024,4096,16384
    python -m scripts.bench_eval --pes rope,rope+self_extend,rope+rerope,rope+logn \
        --lengths 1024,4096,16384 --baseline 1024

A variant is ``pe``, ``pe:backend`` (backend ``cpp``, ``flex`` or ``sdpa``, the model's ``attention``
setting) or ``pe+method`` (an extension method set up for L tokens after training at
``--train-length``). ``compile s``: the first pass minus a later one, i.e. FlexAttention's one-off
compilation (dynamic shapes: later lengths in the same process reuse it).

What is measured: one sequence (batch 1) of L tokens through the same code as
`posexp eval-extrapolate` (``score_windows``: forward without grad, logits, per-token loss), with
an untrained model of the chosen size (speed and memory do not depend on the weights).

* tokens/s: L / median wall time of ``--reps`` passes, after the memory pass (which warms up).
* peak memory, CPU: every (pe, length) point runs in a FRESH subprocess, so no point inherits
  another's allocator caches. In it, the model and input are built, the kernel's resident-set
  high-water mark is reset (``echo 5 > /proc/self/clear_refs``), VmRSS is read as the baseline,
  one pass runs, and VmHWM (the high-water mark) is read. Two numbers:
    - ``pass MiB`` = VmHWM - baseline: memory the pass itself needed at its peak (activations,
      attention workspaces, logits); this is what an L×L tensor per head would blow up;
    - ``peak MiB`` = VmHWM: the whole process at its peak (Python, torch, weights included),
      i.e. what a user sees in `top`.
  RSS is the sound measure on CPU: torch allocates through malloc/mmap, which tracemalloc does
  not see, and the profiler's memory view reports allocations, not the page-level peak.
* peak memory, CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``;
  ``pass`` = peak minus the allocation before the pass, ``peak`` = the peak itself.

Ratios are against ``--baseline`` (default 1024) measured in the same run, for the same PE.
``L×L×H fp32`` is what ONE layer's attention scores would take if materialised (for scale).
Linear memory in L gives a ``pass`` ratio near 4 from 1024 to 4096; quadratic would give 16.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scripts.bench_common import ROOT, child_env, machine_header, module_command, status_kib

SIZES = {"tiny": (64, 2), "small": (128, 4), "base": (768, 12)}
MiB = 2**20


def child(
    variant: str,
    length: int,
    model_size: str,
    heads: int,
    device_name: str,
    reps: int,
    train_length: int,
    precision: str = "fp32",
) -> dict:
    """One measurement point (runs in its own process)."""
    import torch

    from posexp.extension import ExtensionConfig
    from posexp.kernels.choice import KernelChoice
    from posexp.model import GPT, ModelConfig
    from posexp.runtime.device import resolve_device
    from posexp.runtime.precision import autocast
    from posexp.scoring.text import score_windows
    from posexp.scoring.windows import nonoverlap_windows
    from scripts.bench_models import pe_setting

    device = resolve_device(device_name)
    d_model, n_layers = SIZES[model_size]
    torch.manual_seed(0)
    pe, _, method = variant.partition("+")
    pe, _, backend = pe.partition(":")
    l0 = min(length, train_length)
    extension = ExtensionConfig.for_length(method or "none", length, l0)[0]
    name, params = pe_setting(pe)
    model = (
        GPT(
            ModelConfig(
                vocab_size=260,
                d_model=d_model,
                n_layers=n_layers,
                n_heads=heads,
                pe=name,
                pe_params=params,
                train_length=l0,
                extension=extension,
            ),
            KernelChoice(bias=backend or "auto"),
        )
        .to(device)
        .eval()
    )
    tokens = torch.randint(0, 260, (length + 1,))
    windows = nonoverlap_windows(length, length)

    def one_pass() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        score_windows(
            model,
            tokens,
            windows,
            device,
            batch_tokens=length,
            autocast=autocast(precision, device),
        )
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    first = one_pass()  # warm-up: FlexAttention compiles here, outside the memory measurement
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        one_pass()
        peak = torch.cuda.max_memory_allocated()
        pass_bytes, peak_bytes = peak - before, peak
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        before = status_kib("VmRSS")
        one_pass()
        peak = status_kib("VmHWM")
        pass_bytes, peak_bytes = (peak - before) * 1024, peak * 1024
    seconds = statistics.median(one_pass() for _ in range(reps))
    return {
        "pe": variant,
        "length": length,
        "tok_s": length / seconds,
        "pass_mib": pass_bytes / MiB,
        "peak_mib": peak_bytes / MiB,
        "compile_s": max(0.0, first - seconds),
    }


def ratio(value: float, base: float) -> str:
    """value / base, or – when the base is below what RSS can resolve (0.1 MiB)."""
    return f"{value / base:.2f}" if base >= 0.1 else "–"


def measure(args: argparse.Namespace, pe: str, length: int) -> dict:
    """Run ``child`` in a fresh interpreter and read its JSON line."""
    cmd = module_command(
        "bench_eval",
        "--child",
        pe,
        str(length),
        "--model",
        args.model,
        "--heads",
        str(args.heads),
        "--device",
        args.device,
        "--reps",
        str(args.reps),
        "--train-length",
        str(args.train_length),
        "--precision",
        args.precision,
    )
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=child_env(), cwd=ROOT, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"measurement {pe} L={length} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--pes", default="rope,alibi,alibi:flex,alibi:sdpa,t5,t5:sdpa,fire,fire:flex,fire:sdpa"
    )
    p.add_argument("--lengths", default="1024,4096")
    p.add_argument("--baseline", type=int, default=1024, help="length the ratios are against")
    p.add_argument("--model", default="small", choices=sorted(SIZES))
    # 4 heads: 32 dimensions each at d_model 128; --heads 8 gives 16-dimension heads.
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument(
        "--train-length", type=int, default=1024, help="L0 of a pe+method variant (min with L)"
    )
    p.add_argument(
        "--precision",
        default="fp32",
        choices=("fp32", "bf16"),
        help="bf16: the forward under bf16 autocast, as eval-extrapolate scores a bf16-trained run",
    )
    p.add_argument("--json", type=Path, help="also write the rows here")
    p.add_argument("--child", nargs=2, metavar=("PE", "LENGTH"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        pe, length = args.child
        print(
            json.dumps(
                child(
                    pe,
                    int(length),
                    args.model,
                    args.heads,
                    args.device,
                    args.reps,
                    args.train_length,
                    args.precision,
                )
            )
        )
        return

    print(machine_header(args.device))
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.baseline not in lengths:
        lengths = sorted({*lengths, args.baseline})
    d_model, n_layers = SIZES[args.model]
    print(
        f"model={args.model} (d_model {d_model}, {n_layers} layers, {args.heads} heads), "
        f"batch 1, {args.precision}, device={args.device}, threads={os.environ.get('OMP_NUM_THREADS', 'torch default')}"
    )
    rows = []
    for pe in args.pes.split(","):
        for length in lengths:
            rows.append(measure(args, pe, length))
            r = rows[-1]
            print(
                f"  measured {pe:16s} L={length:6d}: {r['tok_s']:10.0f} tok/s  "
                f"pass {r['pass_mib']:8.1f} MiB  peak {r['peak_mib']:8.1f} MiB",
                file=sys.stderr,
            )
    header = (
        "| pe | L | tok/s | ÷ rope at L | pass MiB | pass ÷ base | peak MiB | compile s "
        "| L×L×H fp32 MiB |"
    )
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        base = next(b for b in rows if b["pe"] == r["pe"] and b["length"] == args.baseline)
        rope = next((b for b in rows if b["pe"] == "rope" and b["length"] == r["length"]), None)
        vs_rope = f"{r['tok_s'] / rope['tok_s']:.2f}" if rope else "–"
        quad = r["length"] ** 2 * args.heads * 4 / MiB
        print(
            f"| {r['pe']} | {r['length']} | {r['tok_s']:.0f} | {vs_rope} "
            f"| {r['pass_mib']:.1f} | {ratio(r['pass_mib'], base['pass_mib'])} "
            f"| {r['peak_mib']:.1f} | {r['compile_s']:.1f} | {quad:.0f} |"
        )
    for pe in args.pes.split(","):
        by_len = {r["length"]: r for r in rows if r["pe"] == pe}
        if args.baseline in by_len and 4 * args.baseline in by_len:
            a, b = by_len[args.baseline], by_len[4 * args.baseline]
            print(
                f"{pe}: {args.baseline}→{4 * args.baseline} (4× longer): pass memory "
                f"×{ratio(b['pass_mib'], a['pass_mib'])}, process peak "
                f"×{b['peak_mib'] / a['peak_mib']:.2f} (quadratic would be ×16)"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
