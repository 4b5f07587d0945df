"""Training throughput: bare step vs the full `posexp train` loop, and model-FLOPs utilisation.

    python scripts/bench_train.py                         # d128, 4 layers, 4 heads, 256 x 32, byte
    python scripts/bench_train.py --pe rope,alibi,t5,fire --no-loop   # bare steps side by side
    python scripts/bench_train.py --model base --heads 12 --seq-len 1024 --batch 32 --device cuda --compile
    python scripts/bench_train.py --model base --heads 12 --seq-len 1024 --batch 32 --device cuda --sdpa flash

On CUDA the step runs as `posexp train` does: bf16 autocast, fused AdamW, SDPA with is_causal (no
mask tensor, so the flash kernel applies), pinned host batches copied without blocking, and
torch.compile with --compile. --sdpa flash|efficient|cudnn|math forces one SDPA kernel in (a)
(an error if it cannot run this shape), to check that flash attention is what runs.

(a) bare step: forward, backward, clip, AdamW on random tokens, nothing else; with several PEs
    (--pe a,b,c), each one's bare step in the same run, the first measured again at the end,
    and ratios against the mean of its two measurements;
(b) full loop: `posexp train` in a subprocess (data, logging, eval, checkpoints included), its
    steady-state tokens/s read from its TensorBoard log.
MFU = achieved model FLOP/s / the matmul rate measured here in the same run (fp32 on CPU,
bf16 on CUDA), with model FLOPs per token = 6·(matmul weights) + 12·layers·seq_len·d_model.
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

from posexp.model import GPT, ModelConfig
from posexp.runtime.device import resolve_device
from posexp.runtime.optim import build_optimizer

SIZES = {"tiny": (64, 2), "small": (128, 4), "base": (768, 12)}


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
) -> tuple[float, GPT]:
    """Tokens/s of forward + backward + clip + AdamW on random data."""
    from omegaconf import OmegaConf

    model = GPT(cfg).to(device)
    train = OmegaConf.create({"weight_decay": 0.1, "lr": 1e-3, "betas": [0.9, 0.95]})
    opt = build_optimizer(model, train, device)
    step_model = torch.compile(model) if compile_model else model
    autocast = (
        (lambda: torch.autocast("cuda", dtype=torch.bfloat16))
        if device.type == "cuda"
        else contextlib.nullcontext
    )
    x = torch.randint(0, cfg.vocab_size, (batch, seq_len), device=device)
    kernel = sdpa_context(sdpa)

    def step() -> None:
        with autocast(), kernel():
            loss = step_model(x, x)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    # Median of five timed blocks, like the full loop's median logging window: both sides get the
    # same treatment of a block slowed by another process on the machine.
    rates = []
    for _ in range(5):
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        rates.append(batch * seq_len * steps / (time.perf_counter() - start))
    return statistics.median(rates), model


def full_loop_rate(args: argparse.Namespace, steps: int) -> float:
    """Steady-state tokens/s that `posexp train` logs (first logging window skipped as warm-up)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "posexp",
            "train",
            f"model={args.model}",
            f"heads={args.heads}",
            f"pe={args.pe}",
            f"train.batch_size={args.batch}",
            f"train.seq_len={args.seq_len}",
            f"train.max_steps={steps}",
            "train.log_interval=5",
            f"train.eval_interval={steps}",
            f"train.checkpoint_interval={steps}",
            f"device={args.device}",
            f"train.compile={str(args.compile).lower()}",
            f"hydra.run.dir={tmp}/run",
        ]
        env = {**os.environ, "POSEXP_CACHE": str(Path("outputs/.cache").resolve())}
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        events = EventAccumulator(f"{tmp}/run").Reload()
        rates = [e.value for e in events.Scalars("train/tokens_per_s")]
    # Drop the first window (compilation, caches) and the last (includes eval + checkpoint).
    steady = rates[1:-1] or rates
    return statistics.median(steady)


def main() -> None:
    """Parse options, measure, print the table."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="small", choices=sorted(SIZES))
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--pe", default="rope", help="a PE, or several (comma-separated) side by side")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument(
        "--steps", type=int, default=6, help="timed bare steps per block (median of 5 blocks)"
    )
    p.add_argument("--loop-steps", type=int, default=60, help="steps of the full training loop")
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action="store_true", help="torch.compile (train.compile=true)")
    p.add_argument(
        "--sdpa",
        default="auto",
        choices=["auto", "flash", "efficient", "cudnn", "math"],
        help="force one SDPA kernel in the bare step",
    )
    p.add_argument("--no-loop", action="store_true", help="skip (b), the full `posexp train` loop")
    args = p.parse_args()

    device = resolve_device(args.device)
    d_model, n_layers = SIZES[args.model]
    pes = [pe for pe in args.pe.split(",") if pe]
    args.pe = pes[0]
    configs = {
        pe: ModelConfig(
            vocab_size=260,
            d_model=d_model,
            n_layers=n_layers,
            n_heads=args.heads,
            pe=pe,
            train_length=args.seq_len,
        )
        for pe in pes
    }
    cfg = configs[pes[0]]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = matmul_rate(device, dtype, n=8192 if device.type == "cuda" else 1024)
    bare, model = bare_step_rate(
        cfg, args.batch, args.seq_len, device, args.steps, args.compile, args.sdpa
    )
    others = {
        pe: bare_step_rate(
            configs[pe], args.batch, args.seq_len, device, args.steps, args.compile, args.sdpa
        )[0]
        for pe in pes[1:]
    }
    bare_again = (
        bare_step_rate(cfg, args.batch, args.seq_len, device, args.steps, args.compile, args.sdpa)[
            0
        ]
        if others
        else None
    )
    loop = None if args.no_loop else full_loop_rate(args, args.loop_steps)
    fpt = flops_per_token(model, cfg, args.seq_len)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}), threads {torch.get_num_threads()}, torch {torch.__version__}")
    if device.type == "cuda":
        print(
            f"bf16 autocast, fused AdamW, SDPA {args.sdpa} (flash usable: "
            f"{flash_usable(cfg, args.batch, args.seq_len, device)}), peak memory "
            f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB"
        )
    print(
        f"config: model={args.model} (d_model {d_model}, {n_layers} layers), heads {args.heads}, "
        f"pe {args.pe}, seq_len {args.seq_len}, batch {args.batch}, byte vocab, compile {args.compile}"
    )
    print(f"measured matmul rate ({str(dtype).removeprefix('torch.')}): {peak / 1e9:,.1f} GFLOP/s")
    print(f"model FLOPs per token: {fpt / 1e6:,.2f} MFLOP")
    print(f"{'':18}{'tokens/s':>12}{'MFU':>8}")
    print(f"{'(a) bare step':18}{bare:>12,.0f}{bare * fpt / peak:>8.1%}")
    if loop is not None:
        print(f"{'(b) posexp train':18}{loop:>12,.0f}{loop * fpt / peak:>8.1%}")
        print(f"ratio (b)/(a): {loop / bare:.3f}")
    if others:
        baseline = (bare + bare_again) / 2
        print(
            f"\nbare step side by side (÷ {pes[0]}: the mean of its two measurements, "
            f"{bare:,.0f} before and {bare_again:,.0f} after the others)"
        )
        print(f"{'pe':18}{'tokens/s':>12}{'÷ ' + pes[0]:>10}")
        for pe, rate in [(pes[0], baseline), *others.items()]:
            print(f"{pe:18}{rate:>12,.0f}{rate / baseline:>10.2f}")


if __name__ == "__main__":
    main()
