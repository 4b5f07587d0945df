"""Training throughput against a plain PyTorch baseline, in fp32 and bf16, and model-FLOPs utilisation.

    python scripts/bench_train.py                         # d128, 4 layers, 4 heads, 256 x 32, byte
    python scripts/bench_train.py --model medium --batch 8  # d512, 4 layers
    python scripts/bench_train.py --pe rope,alibi,t5,fire --no-loop   # bare steps side by side
    python scripts/bench_train.py --model base --heads 12 --seq-len 1024 --batch 32 --device cuda --compile
    python scripts/bench_train.py --model base --heads 12 --seq-len 1024 --batch 32 --device cuda --sdpa flash

Every rate is a ratio against the baseline measured in the same run:

(0) plain GPT: a nanoGPT-style model of the same shape written here (pre-norm blocks, fused QKV,
    SDPA is_causal, GELU MLP, tied embeddings, learned positions, init N(0, 0.02)), AdamW, in
    the precision nanoGPT uses (fp32 on the CPU, bf16 autocast on CUDA); measured first and last,
    the ratios use the mean of the two;
(a) bare step: posexp's forward, backward, clip, AdamW on random tokens, nothing else, in each
    precision of --precision; with several PEs (--pe a,b,c), each one's bare step too;
(b) full loop: `posexp train` in a subprocess (data, logging, eval, checkpoints included) in each
    precision, its steady-state tokens/s read from its TensorBoard log.

It also prints the bf16 / fp32 rate of a matmul of the model's MLP shape: where bf16 is not
faster there (a CPU with avx512_bf16 but no AMX, on Intel cores), no bf16 training step can be.
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
from posexp.runtime.precision import autocast as precision_autocast

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


class PlainBlock(torch.nn.Module):
    """nanoGPT's block: pre-norm, fused QKV, SDPA is_causal, GELU MLP, no biases."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        nn = torch.nn
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model, bias=False), nn.LayerNorm(d_model, bias=False)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.fc = nn.Linear(d_model, 4 * d_model, bias=False)
        self.down = nn.Linear(4 * d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x + attn(ln(x)), then + mlp(ln(x))."""
        B, T, C = x.shape
        q, k, v = (
            t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            for t in self.qkv(self.ln1(x)).split(C, dim=2)
        )
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.down(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class PlainGPT(torch.nn.Module):
    """The baseline: a nanoGPT-style GPT in plain PyTorch, the shape of posexp's model."""

    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, length: int) -> None:
        super().__init__()
        nn = torch.nn
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(length, d_model)
        self.blocks = nn.ModuleList(PlainBlock(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model, bias=False)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight
        for p in self.parameters():  # N(0, 0.02) as nanoGPT (N(0, 1) makes denormal gradients)
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits and the mean cross-entropy, computed in fp32."""
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        loss = torch.nn.functional.cross_entropy(
            logits.float().view(-1, logits.size(-1)), targets.reshape(-1)
        )
        return {"logits": logits, "loss": loss}


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
    baseline); ``precision`` None: bf16 on CUDA, fp32 on the CPU (nanoGPT's choice)."""
    from omegaconf import OmegaConf

    if plain:
        model = PlainGPT(cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, seq_len)
    else:
        model = GPT(cfg)
    model = model.to(device)
    train = OmegaConf.create({"weight_decay": 0.1, "lr": 1e-3, "betas": [0.9, 0.95]})
    opt = build_optimizer(model, train, device)
    step_model = torch.compile(model) if compile_model else model
    autocast = precision_autocast(
        precision or ("bf16" if device.type == "cuda" else "fp32"), device
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
    p.add_argument("--precision", default="fp32,bf16", help="posexp's precisions to measure")
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
    precisions = [x for x in args.precision.split(",") if x]
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
    shape = (args.batch, args.seq_len, device, args.steps, args.compile, args.sdpa)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = matmul_rate(device, dtype, n=8192 if device.type == "cuda" else 1024)
    base_first, model = bare_step_rate(cfg, *shape, plain=True)
    rows: list[tuple[str, float]] = []
    for precision in precisions:
        rows.append((f"(a) posexp step, {precision}", bare_step_rate(cfg, *shape, precision)[0]))
    for pe in pes[1:]:
        rows.append((f"(a) posexp step, {pe}", bare_step_rate(configs[pe], *shape)[0]))
    if not args.no_loop:
        for precision in precisions:
            rows.append(
                (f"(b) posexp train, {precision}", full_loop_rate(args, args.loop_steps, precision))
            )
    base_last = bare_step_rate(cfg, *shape, plain=True)[0]
    baseline = (base_first + base_last) / 2
    fpt = flops_per_token(model, cfg, args.seq_len)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}), threads {torch.get_num_threads()}, torch {torch.__version__}")
    if device.type == "cuda":
        print(
            f"fused AdamW, SDPA {args.sdpa} (flash usable: "
            f"{flash_usable(cfg, args.batch, args.seq_len, device)}), peak memory "
            f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB"
        )
    print(
        f"config: d_model {d_model}, {n_layers} layers, heads {args.heads}, pe {args.pe}, "
        f"seq_len {args.seq_len}, batch {args.batch}, byte vocab, compile {args.compile}"
    )
    if device.type == "cpu":
        from posexp.runtime.precision import cpu_bf16_feature, matmul_speedup

        print(
            f"native bf16: {cpu_bf16_feature() or 'none'}; bf16 / fp32 matmul rate at the "
            f"MLP's shape ({args.batch * args.seq_len} x {d_model} x {4 * d_model}): "
            f"{matmul_speedup(d_model, tokens=args.batch * args.seq_len):.2f}x"
        )
    print(f"measured matmul rate ({str(dtype).removeprefix('torch.')}): {peak / 1e9:,.1f} GFLOP/s")
    print(f"model FLOPs per token: {fpt / 1e6:,.2f} MFLOP")
    plain_precision = "bf16" if device.type == "cuda" else "fp32"
    print(f"{'':34}{'tokens/s':>10}{'× plain':>9}{'MFU':>8}")
    print(
        f"{'(0) plain GPT, ' + plain_precision + ' (baseline)':34}{baseline:>10,.0f}{1:>9.2f}"
        f"{baseline * fpt / peak:>8.1%}   ({base_first:,.0f} first, {base_last:,.0f} last)"
    )
    for label, rate in rows:
        print(f"{label:34}{rate:>10,.0f}{rate / baseline:>9.2f}{rate * fpt / peak:>8.1%}")


if __name__ == "__main__":
    main()
