"""Training throughput of posexp against the peers a user would pick instead, at the same shape,
precision and step, in one process; every PE against posexp's learned PE; MFU; a profile.

    python -m scripts.bench_train --no-loop               # d128, 4 layers, 4 heads, 256 x 32, byte
    python -m scripts.bench_train --pe all --peers plain --no-loop   # every PE, both precisions
    python -m scripts.bench_train --profile --no-loop     # where posexp's RoPE step spends its time
    python -m scripts.bench_train --model medium --batch 8  # d512, 4 layers
    python -m scripts.bench_train --model base --heads 12 --seq-len 1024 --batch 32 --device cuda

What is timed (scripts/bench_models.py): one training step (forward, mean cross-entropy from fp32
logits, backward, clip 1.0, AdamW) of each model in each precision of --precision (fp32, bf16
autocast), on fixed random tokens: posexp's GPT with each PE of --pe, and the peers of --peers
(a nanoGPT-style GPT written here; litgpt's GPT with RoPE; x-transformers with rotary), all
built up front and timed in interleaved rounds in alternating order, medians. posexp's
attention runs on the kernel `posexp train` would choose (``--causal auto``: in
bf16 on a CPU, the matmul kernel where it measured faster at this shape; ``--causal both`` adds
rows for the other). Each rate is shown
against the nanoGPT-style model and posexp's learned PE at the same precision, and bf16 against
the same model's fp32. Then, unless --no-loop, the full `posexp train` loop (data, logging, eval,
checkpoints) in a subprocess, its steady-state tokens/s read from its TensorBoard log.

MFU = achieved model FLOP/s / the matmul rate measured here in the same run at the row's own
precision, with model FLOPs per token = 6·(matmul weights) + 12·layers·seq_len·d_model. It also
prints the bf16 / fp32 rate of a matmul of the model's MLP shape: where bf16 is not faster there
(a CPU with avx512_bf16 but no AMX, on Intel cores), no bf16 training step can be.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from posexp.kernels import onednn_linear
from posexp.kernels.choice import KernelChoice
from posexp.kernels.matmul_attention import KERNELS
from posexp.model import GPT, ModelConfig
from posexp.runtime.device import resolve_device
from posexp.runtime.kernel_choice import resolve_causal_kernel, resolve_linear_kernel
from scripts.bench_common import machine_header
from scripts.bench_models import (
    PEERS,
    Step,
    missing_package,
    pe_setting,
    plain_model,
    profile_step,
    training_step,
)

SIZES = {"tiny": (64, 2), "small": (128, 4), "medium": (512, 4), "base": (768, 12)}


def matmul_rate(
    device: torch.device, dtype: torch.dtype, n: int = 1024, seconds: float = 2.0
) -> float:
    """Measured dense matmul FLOP/s for n x n operands."""
    a, b = (
        torch.randn(n, n, device=device, dtype=dtype),
        torch.randn(n, n, device=device, dtype=dtype),
    )
    for _ in range(3):
        a @ b
    sync(device)
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        reps += 1
        if device.type == "cuda" and reps % 50:
            continue
        sync(device)
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - start)


def matmul_step(
    device: torch.device, precision: str, n: int, kernel: str = "torch"
) -> tuple[Step, float]:
    """A step of n x n matmuls in ``precision`` (by torch, or oneDNN's linear op) lasting about
    as long as a model's step on the CPU, and the FLOPs it does."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    reps = 8 if device.type == "cpu" else 200

    def step() -> None:
        for _ in range(reps):
            onednn_linear.linear(a, b, kernel)

    return step, 2 * n**3 * reps


def sync(device: torch.device) -> None:
    """Wait for queued device work."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def flops_per_token(model: GPT, cfg: ModelConfig, seq_len: int) -> float:
    """6 FLOPs per matmul weight per token (fwd+bwd) plus causal-attention score/value FLOPs."""
    matmul_weights = sum(
        p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "pe." not in n
    )
    return 6 * matmul_weights + 12 * cfg.n_layers * seq_len * cfg.d_model


def sdpa_context(name: str):
    """A context forcing one SDPA backend (``auto``: torch's choice)."""
    if name == "auto":
        return contextlib.nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]
    return functools.partial(sdpa_kernel, backend)


def flash_usable(cfg: ModelConfig, batch: int, seq_len: int, device: torch.device) -> str:
    """Whether the flash SDPA kernel runs the model's causal attention shape in bf16."""
    if device.type != "cuda":
        return "n/a (not CUDA)"
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(batch, cfg.n_heads, seq_len, cfg.head_dim, device=device, dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        return "yes"
    except RuntimeError as e:
        return f"no ({str(e).splitlines()[0][:80]})"


def bare_step_rate(
    cfg: ModelConfig,
    batch: int,
    seq_len: int,
    device: torch.device,
    steps: int,
    compile_model: bool,
    sdpa: str = "auto",
    precision: str | None = None,
    plain: bool = False,
) -> tuple[float, torch.nn.Module]:
    """Tokens/s of forward + backward + clip + AdamW on random data (posexp's GPT, or the plain
    baseline), the median of five blocks of ``steps``; ``precision`` None: bf16 on CUDA, fp32
    on the CPU (nanoGPT's choice)."""
    model = plain_model(cfg, seq_len) if plain else GPT(cfg)
    precision = precision or ("bf16" if device.type == "cuda" else "fp32")
    step = training_step(
        model, batch, seq_len, cfg.vocab_size, device, precision, compile_model, sdpa_context(sdpa)
    )
    rate = interleaved_rates({"": step}, device, batch * seq_len, rounds=5, steps=steps)[""]
    return rate, model


def interleaved_rates(
    variants: dict[str, Step], device: torch.device, tokens: int, rounds: int, steps: int
) -> dict[str, float]:
    """Tokens/s of each variant's step, the median over ``rounds`` rounds that time every variant
    in turn (``steps`` steps each), in alternating order: a slow minute on a shared machine, or
    the order itself, then weighs on every variant alike."""
    for step in variants.values():
        for _ in range(2):
            step()
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                variants[name]()
            sync(device)
            times[name].append((time.perf_counter() - start) / steps)
    return {name: tokens / statistics.median(t) for name, t in times.items()}


def full_loop_rate(args: argparse.Namespace, steps: int, precision: str) -> float:
    """Steady-state tokens/s that `posexp train` logs (first logging window skipped as warm-up)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    d_model, n_layers = SIZES[args.model]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "posexp",
            "train",
            "model=small",
            f"model.d_model={d_model}",
            f"model.n_layers={n_layers}",
            f"heads={args.heads}",
            f"pe={args.pe}",
            f"train.batch_size={args.batch}",
            f"train.seq_len={args.seq_len}",
            f"train.max_steps={steps}",
            "train.log_interval=5",
            f"train.eval_interval={steps}",
            f"train.checkpoint_interval={steps}",
            f"train.precision={precision}",
            f"device={args.device}",
            f"train.compile={str(args.compile).lower()}",
            f"hydra.run.dir={tmp}/run",
        ]
        env = {**os.environ, "POSEXP_CACHE": str(Path("outputs/.cache").resolve())}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"posexp train failed:\n{proc.stderr[-2000:]}")
        events = EventAccumulator(f"{tmp}/run").Reload()
        rates = [e.value for e in events.Scalars("train/tokens_per_s")]
    # Drop the first window (compilation, caches) and the last (includes eval + checkpoint).
    steady = rates[1:-1] or rates
    return statistics.median(steady)


def build_variants(
    args: argparse.Namespace, cfgs: dict[str, ModelConfig], device: torch.device
) -> tuple[dict[str, Step], dict[str, tuple[str, str]], list[str]]:
    """Every (model, precision) step to time, what each row is (model, precision), and lines
    saying which peers were skipped."""
    first = next(iter(cfgs.values()))
    kernel = sdpa_context(args.sdpa)
    shape = (args.batch, args.seq_len, first.vocab_size, device)
    steps: dict[str, Step] = {}
    rows: dict[str, tuple[str, str]] = {}
    skipped = []
    for peer in args.peers:
        if (package := missing_package(peer)) is not None:
            skipped.append(
                f"{peer}: skipped, {package} is not installed (pip install -e '.[bench]')"
            )
    for precision in args.precision:
        for peer in args.peers:
            if missing_package(peer) is None:
                builder, _, label = PEERS[peer]
                name = f"{label}, {precision}"
                model = builder(first, args.seq_len)
                steps[name] = training_step(model, *shape, precision, args.compile, kernel)
                rows[name] = (peer, precision)
        for pe, cfg in cfgs.items():
            pairs = posexp_kernels(args, cfg, precision, device)
            for i, (causal, linear) in enumerate(pairs):
                # The first pair is posexp's own choice (its row, named by the kernels that are
                # not the defaults); each other row is named by the kernel it changes.
                tag = ", ".join(
                    k
                    for k, first in zip((causal, linear), pairs[0], strict=True)
                    if ((k != first) if i else (k not in ("sdpa", "torch")))
                )
                name = f"posexp {pe}, {precision}" + (f" ({tag})" if tag else "")
                model = GPT(cfg, KernelChoice(causal=causal, linear=linear))
                steps[name] = training_step(model, *shape, precision, args.compile, kernel)
                rows[name] = (pe if i == 0 else f"{pe} {causal} {linear}", precision)
    return steps, rows, skipped


def posexp_kernels(
    args: argparse.Namespace, cfg: ModelConfig, precision: str, device: torch.device
) -> list[tuple[str, str]]:
    """posexp's (attention, linear) kernels to time at ``precision``: what ``posexp train``
    would choose (``auto``, said on a line), or the ones named; with ``both``, that choice first
    and then a row for each other kernel (a 16-bit attention kernel, an fp32 linear one)."""
    shape = (args.batch, cfg.n_heads, args.seq_len, cfg.head_dim)
    causal, why = resolve_causal_kernel("auto", precision, device, shape)
    if args.causal in KERNELS:
        causal = args.causal if precision != "fp32" else "sdpa"
    else:
        print(f"posexp {precision}: causal attention {causal} ({why})")
    rows = args.batch * args.seq_len
    linear, why = resolve_linear_kernel(
        "auto", precision, device, args.compile, (rows, cfg.d_model, cfg.d_ff or 4 * cfg.d_model)
    )
    if args.linear in onednn_linear.KERNELS:
        runs = precision == "fp32" and device.type == "cpu" and not args.compile
        linear = args.linear if runs else "torch"
    else:
        print(f"posexp {precision}: linear layers {linear} ({why})")
    pairs = [(causal, linear)]
    if args.causal == "both" and precision != "fp32":  # the matmul kernel is a 16-bit one
        pairs += [(k, linear) for k in KERNELS if k != causal]
    if args.linear == "both" and precision == "fp32" and device.type == "cpu" and not args.compile:
        pairs += [(causal, k) for k in onednn_linear.KERNELS if k != linear]
    return pairs


def print_rates(
    rates: dict[str, float], rows: dict[str, tuple[str, str]], peak: dict[str, float], fpt: float
) -> None:
    """The table: tokens/s, ratios at the same precision to the nanoGPT-style model and to
    posexp's learned PE, bf16 over the same model's fp32, MFU."""
    by_row = {row: rates[name] for name, row in rows.items()}
    print(f"{'':34}{'tokens/s':>10}{'× nanoGPT':>11}{'× learned':>11}{'bf16/fp32':>11}{'MFU':>8}")
    for name, (model, precision) in rows.items():
        rate = rates[name]
        cells = [f"{name:34}{rate:>10,.0f}"]
        for ref in ("plain", "learned"):
            base = by_row.get((ref, precision))
            cells.append(f"{rate / base:>11.2f}" if base else f"{'–':>11}")
        fp32 = by_row.get((model, "fp32"))
        cells.append(f"{rate / fp32:>11.2f}" if fp32 and precision != "fp32" else f"{'':>11}")
        cells.append(f"{rate * fpt / peak[precision]:>8.1%}")
        print("".join(cells))


def print_profile(steps: dict[str, Step], rows: dict[str, tuple[str, str]], pe: str) -> None:
    """Where one step of posexp with ``pe`` spends its time, by kind of work, per precision."""
    profiles = {
        precision: profile_step(steps[name])
        for name, (model, precision) in rows.items()
        if model == pe
    }
    kinds = sorted(
        {k for p in profiles.values() for k in p},
        key=lambda k: -max(p.get(k, 0.0) for p in profiles.values()),
    )
    print(f"\nwhere a posexp {pe} step's time goes (torch.profiler, self CPU time, ms per step):")
    print(f"{'':14}" + "".join(f"{p:>16}" for p in profiles))
    for kind in kinds:
        cells = []
        for p in profiles.values():
            total = sum(p.values())
            cells.append(f"{p.get(kind, 0.0):>8.1f} ({p.get(kind, 0.0) / total:>4.0%})")
        print(f"{kind:14}" + "".join(f"{c:>16}" for c in cells))
    print(f"{'total':14}" + "".join(f"{sum(p.values()):>16.1f}" for p in profiles.values()))


def main() -> None:
    """Parse options, measure, print the tables."""
    from posexp.pe import PE_REGISTRY

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="small", choices=sorted(SIZES))
    p.add_argument("--heads", type=int, default=4)
    p.add_argument(
        "--pe",
        default="learned,rope",
        help="posexp PEs or configs/pe presets such as irope (comma-separated), or all",
    )
    p.add_argument("--peers", default=",".join(PEERS), help=f"of {', '.join(PEERS)}; '' none")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=12, help="interleaved rounds (median taken)")
    p.add_argument("--steps", type=int, default=1, help="timed steps per variant and round")
    p.add_argument("--loop-steps", type=int, default=60, help="steps of the full training loop")
    p.add_argument("--precision", default="fp32,bf16", help="precisions to measure")
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action="store_true", help="torch.compile every model")
    p.add_argument(
        "--sdpa", default="auto", choices=["auto", "flash", "efficient", "cudnn", "math"]
    )
    p.add_argument(
        "--causal",
        default="auto",
        choices=["auto", "both", *KERNELS],
        help="posexp's kernel for attention while training: as `posexp train` chooses "
        "(auto), one of them, or both (extra rows)",
    )
    p.add_argument(
        "--linear",
        default="auto",
        choices=["auto", "both", *onednn_linear.KERNELS],
        help="posexp's kernel for fp32 linear layers on a CPU: as `posexp train` chooses "
        "(auto), one of them, or both (extra rows)",
    )
    p.add_argument("--profile", action="store_true", help="where posexp's step spends its time")
    p.add_argument("--no-loop", action="store_true", help="skip the full `posexp train` loop")
    args = p.parse_args()

    device = resolve_device(args.device)
    print(machine_header(str(device)), flush=True)  # first: every figure below is this machine's
    d_model, n_layers = SIZES[args.model]
    pes = sorted(PE_REGISTRY.names()) if args.pe == "all" else [x for x in args.pe.split(",") if x]
    args.precision = [x for x in args.precision.split(",") if x]
    args.peers = [x for x in args.peers.split(",") if x]
    for peer in args.peers:
        if peer not in PEERS:
            raise SystemExit(f"unknown peer {peer!r}; allowed: {', '.join(PEERS)}")
    settings = {pe: pe_setting(pe) for pe in pes}  # a preset composed once
    cfgs = {
        pe: ModelConfig(
            vocab_size=260,
            d_model=d_model,
            n_layers=n_layers,
            n_heads=args.heads,
            pe=name,
            pe_params=params,
            train_length=args.seq_len,
        )
        for pe, (name, params) in settings.items()
    }
    steps, rows, skipped = build_variants(args, cfgs, device)
    n = 8192 if device.type == "cuda" else 1024
    # The matmul rate is timed in the same rounds as the models, so MFU compares like minutes.
    matmuls = {precision: matmul_step(device, precision, n) for precision in args.precision}
    if "fp32" in args.precision and device.type == "cpu" and onednn_linear.available():
        matmuls["fp32 onednn"] = matmul_step(device, "fp32", n, "onednn")
    tokens = args.batch * args.seq_len
    rates = interleaved_rates(
        {**steps, **{f"matmul {p}": step for p, (step, _) in matmuls.items()}},
        device,
        tokens,
        args.rounds,
        args.steps,
    )
    peak = {p: rates.pop(f"matmul {p}") / tokens * flops for p, (_, flops) in matmuls.items()}
    # MFU is against the faster of the CPU's two fp32 matmul kernels (torch's BLAS, oneDNN).
    blas_fp32 = peak.get("fp32")
    if "fp32 onednn" in peak:
        peak["fp32"] = max(peak["fp32"], peak.pop("fp32 onednn"))
    first = next(iter(cfgs.values()))
    fpt = flops_per_token(GPT(first), first, args.seq_len)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}), threads {torch.get_num_threads()}, torch {torch.__version__}")
    print(
        f"shape: d_model {d_model}, {n_layers} layers, {args.heads} heads, seq_len {args.seq_len}, "
        f"batch {args.batch}, byte vocab, compile {args.compile}; the same step for every model "
        f"(cross-entropy, backward, clip 1.0, AdamW); {args.rounds} interleaved rounds of "
        f"{args.steps} steps, medians"
    )
    if device.type == "cuda":
        print(f"flash usable: {flash_usable(first, args.batch, args.seq_len, device)}")
    if device.type == "cpu":
        from posexp.runtime.precision import cpu_bf16_feature, matmul_speedup

        speedup, fp32 = matmul_speedup(d_model, tokens=args.batch * args.seq_len)
        against = "oneDNN" if fp32 == "onednn" else "torch's BLAS"
        print(
            f"native bf16: {cpu_bf16_feature() or 'none'}; bf16 / fp32 matmul rate at the "
            f"MLP's shape ({args.batch * args.seq_len} x {d_model} x {4 * d_model}): "
            f"{speedup:.2f}x (fp32 on {against}, the faster fp32 kernel)"
        )
    blas = f" (torch's BLAS: {blas_fp32 / 1e9:,.1f})" if blas_fp32 != peak.get("fp32") else ""
    print(
        f"matmul rate ({n} x {n}, timed in the same rounds): "
        + ", ".join(f"{p} {rate / 1e9:,.1f} GFLOP/s" for p, rate in peak.items())
        + f"{blas} (MFU: against the row's own precision, the faster kernel)"
    )
    print(f"model FLOPs per token: {fpt / 1e6:,.2f} MFLOP")
    for line in skipped:
        print(line)
    print_rates(rates, rows, peak, fpt)
    if args.profile:
        print_profile(steps, rows, "rope" if "rope" in cfgs else pes[0])
    if not args.no_loop:
        args.pe = pes[0]
        for precision in args.precision:
            rate = full_loop_rate(args, args.loop_steps, precision)
            print(f"{'posexp train (full loop), ' + precision:34}{rate:>10,.0f}")


if __name__ == "__main__":
    main()
