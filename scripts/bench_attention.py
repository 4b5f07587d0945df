"""Causal attention alone, forward and backward, at one training shape: torch's SDPA against
posexp's matmul kernel (``posexp/kernels/matmul_attention.py``), over the whole batch in one
call as it runs and in ``--chunks`` equal chunks, in fp32 and bf16, interleaved in one process.

    python -m scripts.bench_attention                      # batch 32, 4 heads, 256 tokens, 32-dim
    python -m scripts.bench_attention --chunks 2,4,16 --precision fp32
    MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 \\
        python -m scripts.bench_attention --precision fp32   # glibc's allocator told to keep memory

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
from collections.abc import Callable

import torch

from posexp.kernels.matmul_attention import (
    _mask,
    causal_attention,
    sdpa_causal,
    time_kernels,
)
from scripts.bench_common import machine_header

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
    p.add_argument(
        "--blocked",
        default="8:4,16:4",
        help="more rows: HEADS:BLOCKS, the hand-written kernel over HEADS heads at a time, its "
        "queries in BLOCKS blocks that skip the masked keys ('' for none)",
    )
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return p.parse_args(argv)


def chunked(chunks: int) -> Callable[..., torch.Tensor]:
    """The matmul kernel over ``chunks`` slices of the batch, each in one call."""

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        parts = zip(q.chunk(chunks), k.chunk(chunks), v.chunk(chunks), strict=True)
        return torch.cat([causal_attention(*part) for part in parts])

    return attention


class BlockedAttention(torch.autograd.Function):
    """Causal attention with a hand-written backward, tried for fp32 (not in posexp): ``heads``
    (batch·head) rows at a time, so each group's scores stay in cache, and queries in ``blocks``
    blocks, block r scoring keys up to its own end only (a fraction (n+1)/2n of the square).
    The backward uses dS = P ⊙ (dP − rowsum(dO ⊙ O)), one pass fewer than softmax's own."""

    @staticmethod
    def forward(ctx, q, k, v, heads: int, blocks: int):  # noqa: ANN001, ANN205
        B, H, L, d = q.shape
        q3, k3, v3 = (t.reshape(B * H, L, d) for t in (q, k, v))
        mask, size, weights = _mask(L, q.dtype, q.device), -(-L // blocks), []
        o = torch.empty(B * H, L, d, dtype=q.dtype)
        for i in range(0, B * H, heads):
            g = slice(i, i + heads)
            for lo in range(0, L, size):
                hi = min(lo + size, L)
                scores = torch.baddbmm(
                    mask[lo:hi, :hi], q3[g, lo:hi], k3[g, :hi].transpose(1, 2), alpha=d**-0.5
                )
                weights.append(scores.softmax(-1))
                o[g, lo:hi] = torch.bmm(weights[-1], v3[g, :hi])
        ctx.save_for_backward(q3, k3, v3, o, *weights)
        ctx.plan = (heads, blocks, (B, H, L, d))
        return o.view(B, H, L, d)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        q3, k3, v3, o, *weights = ctx.saved_tensors
        heads, blocks, (B, H, L, d) = ctx.plan
        do = grad.reshape(B * H, L, d)
        delta = (do * o).sum(-1, keepdim=True)
        dq = torch.empty_like(q3)
        dk, dv = torch.zeros_like(k3), torch.zeros_like(v3)
        size, kept = -(-L // blocks), iter(weights)
        for i in range(0, B * H, heads):
            g = slice(i, i + heads)
            for lo in range(0, L, size):
                hi, p = min(lo + size, L), next(kept)
                ds = torch.bmm(do[g, lo:hi], v3[g, :hi].transpose(1, 2)).sub_(delta[g, lo:hi])
                ds.mul_(p)
                dq[g, lo:hi] = torch.bmm(ds, k3[g, :hi]).mul_(d**-0.5)
                dk[g, :hi].baddbmm_(ds.transpose(1, 2), q3[g, lo:hi], alpha=d**-0.5)
                dv[g, :hi].baddbmm_(p.transpose(1, 2), do[g, lo:hi])
        return dq.view(B, H, L, d), dk.view(B, H, L, d), dv.view(B, H, L, d), None, None


def blocked(heads: int, blocks: int) -> Callable[..., torch.Tensor]:
    """BlockedAttention at one setting, as a kernel (q, k, v) -> output."""
    return lambda q, k, v: BlockedAttention.apply(q, k, v, heads, blocks)


def measure(args: argparse.Namespace, dtype: torch.dtype) -> dict[str, float]:
    """Milliseconds per forward and backward of each kernel at ``dtype``, by name."""
    kernels: dict[str, Callable[..., torch.Tensor]] = {
        "sdpa": sdpa_causal,
        "matmul (posexp)": causal_attention,
    }
    for n in sorted({int(c) for c in args.chunks.split(",")} - {1}):
        kernels[f"matmul, {n} chunks"] = chunked(n)
    for setting in filter(None, args.blocked.split(",")):
        heads, blocks = (int(x) for x in setting.split(":"))
        kernels[f"hand-written, {heads}h x {blocks}q"] = blocked(heads, blocks)
    shape = (args.batch, args.heads, args.seq_len, args.head_dim)
    seconds = time_kernels(kernels, shape, torch.device("cpu"), dtype, reps=args.rounds)
    return {name: 1e3 * value for name, value in seconds.items()}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Print, and return, each precision's milliseconds per kernel."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = f"batch {args.batch}, {args.heads} heads, {args.seq_len} tokens, {args.head_dim}-dim"
    print(machine_header())
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
