"""Causal attention alone, forward and backward, at one training shape: torch's SDPA against
posexp's matmul kernel (``posexp/kernels/matmul_attention.py``), over the whole batch in one
call as it runs and in ``--chunks`` equal chunks, in fp32 and bf16, interleaved in one process.

    python scripts/bench_attention.py                      # batch 32, 4 heads, 256 tokens, 32-dim
    python scripts/bench_attention.py --chunks 2,4,16 --precision fp32
    MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 \\
        python scripts/bench_attention.py --precision fp32   # glibc's allocator told to keep memory

Why it exists: ``attention.causal=auto`` takes the matmul kernel only in bf16. This shows the
per-layer times behind that rule on your CPU, and what the fp32 kernel loses to the allocator:
an fp32 (B·H, L, L) tensor of 32 MiB or more is above glibc's largest mmap threshold, so each
one is mapped and page-faulted afresh; split into batch chunks (``--chunks``) the kernel's
tensors stay below it. Timed alone, the bf16 kernel is bimodal the same way (the whole batch's
16 MiB of scores: 14.3 ms a layer in one run, 27 ms in the next; 4 chunks 13-15 ms each time),
but inside a training step, where the allocator already holds such blocks, the whole batch ran
4-5% faster than 4 chunks, so the kernel keeps it whole. q, k and v are laid out as the model hands them over (views into one
(B, L, 3, H, d) projection) and the output's gradient arrives through (B, L, H·d), as in a
model. Medians over ``--rounds`` interleaved rounds after one to warm up (the timing ``auto``
itself uses); the ratio is SDPA's time over the row's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from posexp.kernels.matmul_attention import (  # noqa: E402
    causal_attention,
    sdpa_causal,
    time_kernels,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--chunks", default="4,16", help="more rows: the batch in this many chunks")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return p.parse_args(argv)


def chunked(chunks: int) -> Callable[..., torch.Tensor]:
    """The matmul kernel over ``chunks`` slices of the batch, each in one call."""

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        parts = zip(q.chunk(chunks), k.chunk(chunks), v.chunk(chunks), strict=True)
        return torch.cat([causal_attention(*part) for part in parts])

    return attention


def measure(args: argparse.Namespace, dtype: torch.dtype) -> dict[str, float]:
    """Milliseconds per forward and backward of each kernel at ``dtype``, by name."""
    kernels: dict[str, Callable[..., torch.Tensor]] = {
        "sdpa": sdpa_causal,
        "matmul (posexp)": causal_attention,
    }
    for n in sorted({int(c) for c in args.chunks.split(",")} - {1}):
        kernels[f"matmul, {n} chunks"] = chunked(n)
    shape = (args.batch, args.heads, args.seq_len, args.head_dim)
    seconds = time_kernels(kernels, shape, torch.device("cpu"), dtype, reps=args.rounds)
    return {name: 1e3 * value for name, value in seconds.items()}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Print, and return, each precision's milliseconds per kernel."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = f"batch {args.batch}, {args.heads} heads, {args.seq_len} tokens, {args.head_dim}-dim"
    print(f"causal attention, forward + backward, {shape}, {torch.get_num_threads()} threads")
    results = {}
    for precision in args.precision.split(","):
        ms = measure(args, DTYPES[precision])
        results[precision] = ms
        for name, value in ms.items():
            print(f"  {precision} {name:<24} {value:8.1f} ms  x{ms['sdpa'] / value:.2f} SDPA")
    return results


if __name__ == "__main__":
    main()
