"""Causal attention as two batched matmuls and a softmax (with a position bias, if any), for
training in bf16 on a CPU.

torch's fused CPU attention (SDPA's flash kernel) runs no faster in bf16 than in fp32 at small
head dims: on a 2-core AMD EPYC with avx512_bf16, 32-dim heads, 256 tokens and a batch of 32,
its forward and backward took 33 ms per layer in bf16 against 21 ms for the two bf16 matmuls
here, whose rate is 3-4x fp32's on that CPU. The price is memory: the (L x L) weights of every
head are kept for the backward, so the path is taken only up to ``MAX_WEIGHTS`` of them per
call, and only where the run chose it (``attention.causal``; ``auto`` measures both kernels at
the run's shape, ``posexp.runtime.kernel_choice``).

The numbers differ from SDPA's by bf16 rounding only: the scores and the weights are rounded to
bf16 (as a written-out attention under autocast has them); the loss it trains to is measured
against SDPA's and fp32's in the performance docs.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

KERNELS = ("sdpa", "matmul")
CHOICES = ("auto", *KERNELS)
MAX_WEIGHTS = 2**25  # B·H·L² weights kept per layer for the backward: 64 MiB in bf16
HALF = (torch.bfloat16, torch.float16)


def applies(q: torch.Tensor) -> bool:
    """True where the matmul kernel may run for queries ``q`` (B, H, L, d): 16-bit, training,
    and at most MAX_WEIGHTS weights."""
    B, H, L, _ = q.shape
    return q.dtype in HALF and torch.is_grad_enabled() and B * H * L * L <= MAX_WEIGHTS


@functools.lru_cache(maxsize=8)
def _mask(length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The additive causal mask: 0 on and below the diagonal, -inf above."""
    return torch.full((length, length), float("-inf"), device=device).triu(1).to(dtype)


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout: float = 0.0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(QKᵀ/√d + bias + causal mask) V for q, k, v of shape (B, H, L, d), queries and
    keys at the same positions; ``bias`` (H, L, L) or (B, H, L, L), an encoding's position bias."""
    B, H, L, d = q.shape
    with torch.profiler.record_function("posexp::matmul_attention"):  # named in a profile
        added = _mask(L, q.dtype, q.device)
        if bias is not None:  # one additive term per (row, head), the mask folded in
            added = (bias.to(q.dtype) + added).expand(B, H, L, L).reshape(B * H, L, L)
        scores = torch.baddbmm(
            added,
            q.reshape(B * H, L, d),
            k.reshape(B * H, L, d).transpose(1, 2),
            alpha=d**-0.5,
        )
        # In the inputs' dtype: torch's CPU softmax accumulates in fp32 inside and rounds its
        # output (a softmax in fp32 with casts either side doubled this kernel's time).
        weights = scores.softmax(-1)
        if dropout > 0:
            weights = F.dropout(weights, dropout)
        return torch.bmm(weights, v.reshape(B * H, L, d)).view(B, H, L, d)


def time_kernels(
    kernels: dict[str, Callable[..., torch.Tensor]],
    shape: tuple[int, int, int, int],
    device: torch.device,
    dtype: torch.dtype = torch.bfloat16,
    reps: int = 5,
) -> dict[str, float]:
    """Median seconds of one forward and backward of each attention kernel (q, k, v) -> output
    at ``shape`` (batch, heads, length, head dim), q, k and v laid out as the model hands them
    over (views into one (B, L, 3, H, d) projection): ``reps`` interleaved rounds, the order
    reversed every other round, after one to warm up. The inputs come from a generator of their
    own, so the run's random stream is not touched."""
    batch, heads, length, head_dim = shape
    g = torch.Generator(device=device).manual_seed(0)
    qkv = torch.randn(batch, length, 3, heads, head_dim, generator=g, device=device)
    qkv = qkv.to(dtype).requires_grad_()
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    # The output's gradient arrives as the model's does: through (B, L, H·d), a transposed view.
    probe = torch.randn(batch, length, heads * head_dim, generator=g, device=device).to(dtype)
    times: dict[str, list[float]] = {name: [] for name in kernels}
    with torch.enable_grad():
        for rep in range(reps + 1):
            for name, kernel in kernels.items() if rep % 2 else reversed(kernels.items()):
                start = time.perf_counter()
                y = kernel(q, k, v)
                (y.transpose(1, 2).reshape(batch, length, -1) * probe).sum().backward()
                qkv.grad = None
                if rep:  # the first round warms up
                    times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch's fused causal attention, the kernel this one is measured against."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def measure_speedup(
    batch: int, heads: int, length: int, head_dim: int, device: torch.device, reps: int = 5
) -> float:
    """SDPA's time over the matmul kernel's for one forward and backward in bf16 at this shape
    (``time_kernels``)."""
    kernels = {"sdpa": sdpa_causal, "matmul": causal_attention}
    seconds = time_kernels(kernels, (batch, heads, length, head_dim), device, reps=reps)
    return seconds["sdpa"] / seconds["matmul"]
