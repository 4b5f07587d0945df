"""Which kernel trains causal attention in 16-bit (every encoding that leaves attention to the
model, position biases included): torch's SDPA, or two batched matmuls and a softmax
(``posexp.kernels.matmul_attention``), ``attention.causal``; and which runs the linear layers in
fp32 on a CPU: torch's BLAS or oneDNN (``posexp.kernels.onednn_linear``), ``train.linear``.

``auto`` takes the matmul kernel only where it can win: bf16 training on a CPU, at most
``MAX_WEIGHTS`` attention weights per layer, and only if, timed at the run's own shape on this
CPU, it ran at least ``MIN_SPEEDUP`` times SDPA's speed. The verdict is cached per CPU, torch
version, thread count and shape, so every run on one machine makes the same choice, and a resumed
run keeps the kernel its checkpoint recorded (an exact resume needs the same arithmetic).
``train.linear=auto`` likewise takes oneDNN only in fp32 on a CPU, uncompiled, where it timed at
least ``MIN_SPEEDUP`` times torch's speed at the run's shape.
"""

from __future__ import annotations

from pathlib import Path

import torch

from posexp.errors import choose
from posexp.kernels import onednn_linear
from posexp.kernels.matmul_attention import CHOICES, MAX_WEIGHTS, measure_speedup
from posexp.kernels.onednn_linear import CHOICES as LINEAR_CHOICES
from posexp.runtime.precision import cached_speedup, cpu_name

MIN_SPEEDUP = 1.1  # near parity the extra memory buys nothing, and a verdict could flip with noise


def resolve_causal_kernel(
    choice: str,
    precision: str,
    device: torch.device,
    shape: tuple[int, int, int, int],
    cache_dir: Path | None = None,
    recorded: str | None = None,
    resuming: bool = False,
) -> tuple[str, str]:
    """``sdpa`` or ``matmul`` for a run training at ``shape`` (batch, heads, tokens, head dim)
    in ``precision`` on ``device``, and why (for the run's log)."""
    choose("attention.causal", choice, CHOICES)
    if resuming and choice == "auto":
        return recorded or "sdpa", "the kernel this run trained with (resume)"
    if choice != "auto":
        return choice, f"attention.causal={choice}"
    if precision != "bf16" or device.type != "cpu":
        where = "fp32" if precision != "bf16" else f"bf16 on {device.type}"
        return "sdpa", f"auto: sdpa for {where}"
    batch, heads, length, head_dim = shape
    if batch * heads * length * length > MAX_WEIGHTS:
        return "sdpa", (
            f"auto: sdpa, as {batch}x{heads}x{length}x{length} weights a layer is over the "
            f"{MAX_WEIGHTS:,} the matmul kernel keeps"
        )
    key = f"v1|{cpu_name()}|{torch.__version__}|{torch.get_num_threads()}|{shape}"
    speedup = cached_speedup(
        cache_dir, "kernels/causal_matmul", key, lambda: measure_speedup(*shape, device)
    )
    verdict = "matmul" if speedup >= MIN_SPEEDUP else "sdpa"
    # No parentheses: the log line wraps this reason in its own.
    return verdict, (
        f"auto: {verdict}; in bf16 on this CPU the matmul kernel ran causal attention's forward "
        f"and backward at {speedup:.2f}x SDPA's speed for batch {batch}, {heads} heads, "
        f"{length} tokens, {head_dim}-dim heads, {_threads()}: "
        f"{'at least' if verdict == 'matmul' else 'below'} the {MIN_SPEEDUP:.2f}x auto asks"
    )


def resolve_linear_kernel(
    choice: str,
    precision: str,
    device: torch.device,
    compiled: bool,
    shape: tuple[int, int, int],
    cache_dir: Path | None = None,
    recorded: str | None = None,
    resuming: bool = False,
) -> tuple[str, str]:
    """``torch`` or ``onednn`` for the linear layers of a run training at ``shape`` (rows a
    step, d_model, MLP width) in ``precision`` on ``device``, and why (for the run's log)."""
    choose("train.linear", choice, LINEAR_CHOICES)
    said = "auto" if choice == "auto" else f"train.linear={choice}"
    # Where oneDNN cannot run, torch: a resume too (one trained on oneDNN, now in bf16, compiled
    # or on a GPU, would otherwise record a kernel its layers do not run on).
    if precision != "fp32" or device.type != "cpu" or compiled:
        where = f"{precision} on {device.type}" + (", compiled" if compiled else "")
        return "torch", f"{said}: torch for {where}"
    if choice != "torch" and not onednn_linear.available():
        return "torch", f"{said}: torch, as torch {torch.__version__} has no oneDNN linear op here"
    if resuming and choice == "auto":
        return recorded or "torch", "the kernel this run trained with (resume)"
    if choice != "auto":
        return choice, f"train.linear={choice}"
    rows, d_model, hidden = shape
    key = f"v1|{cpu_name()}|{torch.__version__}|{torch.get_num_threads()}|{shape}"
    speedup = cached_speedup(
        cache_dir,
        "kernels/linear_onednn",
        key,
        lambda: onednn_linear.measure_speedup(rows, d_model, hidden),
    )
    verdict = "onednn" if speedup >= MIN_SPEEDUP else "torch"
    return verdict, (
        f"auto: {verdict}; in fp32 on this CPU oneDNN ran the MLP's linear layers at "
        f"{speedup:.2f}x torch's speed for {rows} rows, d_model {d_model}, MLP {hidden}, "
        f"{_threads()}: {'at least' if verdict == 'onednn' else 'below'} the {MIN_SPEEDUP:.2f}x "
        "auto asks"
    )


def _threads() -> str:
    """The threads a kernel was timed on, as the log says them: ``1 thread``, ``2 threads``."""
    threads = torch.get_num_threads()
    return f"{threads} thread{'' if threads == 1 else 's'}"
