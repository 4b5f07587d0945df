"""A run's kernels, resolved once where it starts (``resolve_run_kernels``) into the
``KernelChoice`` the model is handed (``evaluation_kernels`` for an evaluation): its precision,
the bias backend (``attention.backend``), which kernel trains causal attention in 16-bit (every
encoding that leaves attention to the model, position biases included: torch's SDPA, or two
batched matmuls and a softmax, ``posexp.kernels.matmul_attention``; ``attention.causal``), and
which runs the linear layers in fp32 on a CPU (torch's BLAS or oneDNN,
``posexp.kernels.onednn_linear``; ``train.linear``).

``auto`` takes the matmul kernel only where it can win: bf16 training on a CPU, at most
``MAX_WEIGHTS`` attention weights per layer, and only if, timed at the run's own shape on this
CPU, it ran at least ``MIN_SPEEDUP`` times SDPA's speed. The verdict is cached per CPU, torch
version, thread count and shape, so every run on one machine makes the same choice, and a resumed
run keeps the kernel its checkpoint recorded (an exact resume needs the same arithmetic).
``train.linear=auto`` likewise takes oneDNN only in fp32 on a CPU, uncompiled, where it timed at
least ``MIN_SPEEDUP`` times torch's speed at the run's shape.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posexp.errors import choose
from posexp.kernels import flex, onednn_linear
from posexp.kernels.choice import KernelChoice
from posexp.kernels.matmul_attention import CHOICES, MAX_WEIGHTS, measure_speedup
from posexp.kernels.onednn_linear import CHOICES as LINEAR_CHOICES
from posexp.pe import get_pe
from posexp.runtime import distributed
from posexp.runtime.precision import cached_speedup, cpu_name, run_precision

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


@dataclass(frozen=True)
class RunKernels:
    """What a run trains on, and why (for its log and provenance): ``precision`` (fp32, bf16),
    ``kernels`` for the model, and ``attention`` (the causal kernel, or ``own`` where the encoding
    computes its attention itself)."""

    precision: str
    precision_reason: str
    kernels: KernelChoice
    attention: str
    attention_reason: str
    linear_reason: str

    def facts(self) -> dict[str, Any]:
        """The session facts ``provenance.start`` records."""
        return {
            "precision": self.precision,
            "precision_reason": self.precision_reason,
            "causal_kernel": self.attention,
            "causal_kernel_reason": self.attention_reason,
            "linear_kernel": self.kernels.linear,
            "linear_kernel_reason": self.linear_reason,
        }

    def log(self, log: logging.Logger) -> None:
        """The run log's lines about them."""
        log.info("precision: %s (%s)", self.precision, self.precision_reason)
        log.info("attention while training: %s (%s)", self.attention, self.attention_reason)
        log.info("linear layers: %s (%s)", self.kernels.linear, self.linear_reason)

    def describe_bias(self, device: torch.device, flex_kind: str | None) -> str:
        """The bias kernel, as the run's model line says it."""
        return flex.describe(self.kernels.bias, device, flex_kind)


def resolve_run_kernels(
    cfg: Any, mcfg: Any, device: torch.device, saved_meta: dict[str, Any]
) -> RunKernels:
    """The precision and kernels a run (``cfg``: its ``RunConfig``, ``mcfg``: its network)
    trains on at its own shape: ``auto`` measured on this machine (cached per CPU), a resume's
    recorded choice kept (``saved_meta``: its checkpoint's meta, {} for a new run)."""
    resuming, cache_dir = bool(cfg.resume), Path(cfg.cache_dir)
    recorded = saved_meta.get("kernels") or {}
    precision, precision_why = run_precision(
        cfg.train.precision,
        device,
        mcfg.d_model,
        cache_dir,
        recorded=saved_meta.get("precision"),
        resuming=resuming,
    )
    batch = cfg.train.batch_size // distributed.world_size()
    causal = "sdpa"
    attention_why = f"pe={mcfg.pe} computes its attention itself; attention.causal is unused"
    uses_kernel = get_pe(mcfg.pe).uses_causal_kernel(dict(mcfg.pe_params))
    if uses_kernel:
        causal, attention_why = resolve_causal_kernel(
            cfg.attention.causal,
            precision,
            device,
            (batch, mcfg.n_heads, cfg.train.seq_len, mcfg.head_dim),
            cache_dir,
            recorded=recorded.get("causal"),
            resuming=resuming,
        )
    linear, linear_why = resolve_linear_kernel(
        cfg.train.linear,
        precision,
        device,
        cfg.train.compile,
        (batch * cfg.train.seq_len, mcfg.d_model, mcfg.d_ff or 4 * mcfg.d_model),
        cache_dir,
        recorded=recorded.get("linear"),
        resuming=resuming,
    )
    return RunKernels(
        precision,
        precision_why,
        KernelChoice(cfg.attention.backend, causal, linear),
        causal if uses_kernel else "own",
        attention_why,
        linear_why,
    )


def evaluation_kernels(meta: dict[str, Any]) -> KernelChoice:
    """The kernels an evaluation or a generation runs a trained model on: those its run trained
    with (``meta``: its checkpoint's meta), so its bias backend (``attention.backend``) holds;
    the defaults for a run that recorded none."""
    return KernelChoice(**(meta.get("kernels") or {}))
