"""Before the first step: the memory a training step needs and how long it takes, from shapes.

A config that asks for more than the machine has must not start and sit in its first step for
hours (nor be killed by the OOM killer without a word): the estimate is made from the network's
shapes and the matmul rate this machine measures (cached per device, precision, width and
kernel, like the precision verdict). Both are lower bounds, so an error is certain and a warning is honest:

* memory: weights, gradients and AdamW's two moments (16 bytes a parameter), the activations
  a backward pass keeps (about ``ACTIVATION_FLOATS`` x d_model floats per token and layer, plus
  one H x T x T score tensor per layer where a position bias, a logit term or the bf16 matmul
  kernel keeps the attention weights), and the logits with their log-softmax and gradient;
* time: the step's model FLOPs (6 x parameters x tokens plus the attention's 12 x layers x
  d_model x T per token, as PaLM counts them) at the measured rate of one matmul of the
  model's width, which a whole step never beats.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posexp.errors import PosexpError
from posexp.kernels import onednn_linear
from posexp.pe.base import LogitTerm
from posexp.runtime import distributed
from posexp.runtime.hardware import available_memory
from posexp.runtime.precision import cached_measurement, cpu_name

log = logging.getLogger("posexp")

# Floats a block keeps per token for its backward pass, in units of d_model: the two norms'
# inputs, q, k, v, the attention output and projection (7), the MLP's input, hidden and
# activated hidden at 4 x d_model (9). Fewer than any implementation keeps: a lower bound.
ACTIVATION_FLOATS = 16
# A step this slow (seconds) is named before it starts, with the whole run's estimate.
SLOW_STEP_S = 60.0
# A step whose memory is above this share of what is free is named as well.
MEMORY_WARN_SHARE = 0.8


@dataclass(frozen=True)
class StepEstimate:
    """Lower bounds for one training step (and one evaluation pass) of a run."""

    memory_bytes: int
    step_flops: float
    eval_flops: float
    rate: float | None  # measured matmul FLOP/s of this device and precision; None: unmeasured
    available: int | None  # bytes free on the device now; None where this cannot be read

    @property
    def step_seconds(self) -> float | None:
        """At least this long per step (None without a measured rate)."""
        return self.step_flops / self.rate if self.rate else None

    @property
    def eval_seconds(self) -> float | None:
        """At least this long per evaluation (None without a measured rate)."""
        return self.eval_flops / self.rate if self.rate else None


def flops_per_token(params: int, n_layers: int, d_model: int, seq_len: int) -> float:
    """Forward + backward model FLOPs per trained token (PaLM's count: 6N + 12 L d T)."""
    return 6.0 * params + 12.0 * n_layers * d_model * seq_len


def step_memory(
    mcfg: Any, params: int, rows: int, seq_len: int, keeps_scores: bool, score_bytes: int = 4
) -> int:
    """Bytes one training step holds at least: weights, gradients, AdamW state, activations,
    the attention weights where they are kept (``score_bytes`` each), and the logits with their
    gradient."""
    tokens = rows * seq_len
    state = 16 * params
    activations = 4 * ACTIVATION_FLOATS * mcfg.d_model * mcfg.n_layers * tokens
    scores = rows * mcfg.n_heads * seq_len * seq_len * mcfg.n_layers if keeps_scores else 0
    scores *= score_bytes
    logits = 3 * 4 * tokens * mcfg.vocab_size
    return state + activations + scores + logits


def matmul_rate(
    device: torch.device,
    precision: str,
    width: int,
    cache_dir: Path | None,
    kernel: str = "torch",
) -> float:
    """Measured FLOP/s of a (tokens x width) @ (width x 4 width) product in the run's precision
    on ``device`` by the run's linear ``kernel`` (train.linear), cached per device (a GPU's
    name, a CPU's name and numbers), torch version, thread count, width and kernel."""
    # v1 named a CPU only "cpu", so every CPU shared one rate; its files are simply not found.
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"cpu {cpu_name()}" if device.type == "cpu" else device.type
    key = f"v2|{name}|{torch.__version__}|{torch.get_num_threads()}|{precision}|{width}|{kernel}"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    def measure() -> tuple[float, None]:
        return _measure(device, dtype, width, kernel), None

    cache = Path(cache_dir) if cache_dir is not None else None
    return cached_measurement(cache, "precision/matmul_rate", key, measure, field="rate")[0]


def _measure(
    device: torch.device, dtype: torch.dtype, width: int, kernel: str = "torch", reps: int = 3
) -> float:
    """The best of ``reps`` timings of a product of about a GFLOP (after a warm-up)."""
    tokens = max(512, min(8192, 2**27 // (width * width)))
    g = torch.Generator(device=device).manual_seed(0)  # the run's random stream is not touched
    a = torch.randn(tokens, width, device=device, generator=g).to(dtype)
    b = torch.randn(4 * width, width, device=device, generator=g).to(dtype)  # (out, in)
    best = float("inf")
    for rep in range(reps + 1):
        start = time.perf_counter()
        onednn_linear.linear(a, b, kernel)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if rep:
            best = min(best, time.perf_counter() - start)
    return 2.0 * tokens * width * 4 * width / max(best, 1e-9)


def estimate_step(
    mcfg: Any,
    params: int,
    rows: int,
    seq_len: int,
    eval_tokens: int,
    keeps_scores: bool,
    rate: float | None,
    available: int | None,
    score_bytes: int = 4,
) -> StepEstimate:
    """The estimate of one step of ``rows`` x ``seq_len`` tokens (per process) and of one
    evaluation pass over ``eval_tokens`` (a forward pass: a third of a step's FLOPs a token)."""
    per_token = flops_per_token(params, mcfg.n_layers, mcfg.d_model, seq_len)
    return StepEstimate(
        memory_bytes=step_memory(mcfg, params, rows, seq_len, keeps_scores, score_bytes),
        step_flops=per_token * rows * seq_len,
        eval_flops=per_token / 3 * eval_tokens,
        rate=rate,
        available=available,
    )


def gib(n: float) -> str:
    """Bytes as GiB (MiB below one)."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def duration(seconds: float) -> str:
    """3.2 s, 4.5 min, 2.1 h."""
    if seconds < 120:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def check_step(est: StepEstimate, train: Any, device: torch.device) -> list[str]:
    """Refuse a step that cannot fit (``PosexpError``, one line); the warnings to log for one
    that nearly does or that runs slowly. ``train``: the run's ``TrainConfig``."""
    sizes = f"train.batch_size={train.batch_size}, train.seq_len={train.seq_len}"
    if est.available is not None and est.memory_bytes > est.available:
        raise PosexpError(
            f"one training step needs at least {gib(est.memory_bytes)} ({sizes}) and {device.type} "
            f"has {gib(est.available)} free; lower train.batch_size, train.seq_len or the model"
        )
    warnings = []
    if est.available is not None and est.memory_bytes > MEMORY_WARN_SHARE * est.available:
        warnings.append(
            f"one training step needs at least {gib(est.memory_bytes)} of the "
            f"{gib(est.available)} free on {device.type} ({sizes}): close to running out"
        )
    step_s, eval_s = est.step_seconds, est.eval_seconds
    if step_s is not None and eval_s is not None and step_s + eval_s > SLOW_STEP_S:
        assert est.rate is not None
        total = step_s * train.max_steps + eval_s * (train.max_steps // train.eval_interval + 1)
        warnings.append(
            f"slow: one step takes at least {duration(step_s)} and one evaluation "
            f"{duration(eval_s)} ({est.step_flops:.3g} FLOP a step at the measured "
            f"{est.rate / 1e9:,.0f} GFLOP/s; {sizes}, train.eval_tokens={train.eval_tokens}); "
            f"{train.max_steps} steps: at least {duration(total)}"
        )
    return warnings


def check_budget(
    cfg: Any,
    mcfg: Any,
    model: Any,
    device: torch.device,
    precision: str,
    row_tokens: int | None,
) -> None:
    """Before the first step: refuse one that cannot fit in memory, name one that nearly does
    or that takes long. ``cfg``: the run's ``RunConfig``; ``model``: its ``GPT``."""
    kernels = model.kernels  # the KernelChoice the run resolved
    rate = matmul_rate(device, precision, mcfg.d_model, Path(cfg.cache_dir), kernels.linear)
    matmul_kernel = kernels.causal == "matmul" and precision == "bf16"
    est = estimate_step(
        mcfg,
        model.num_params(),
        max(1, cfg.train.batch_size // distributed.world_size()),
        row_tokens or cfg.train.seq_len,
        cfg.train.eval_tokens,
        # A bias or a logit term keeps fp32 weights; the bf16 matmul kernel, bf16 ones.
        keeps_scores=model.pe.logit_term is not LogitTerm.NONE or matmul_kernel,
        rate=rate,
        available=available_memory(device.type),
        score_bytes=2 if matmul_kernel and model.pe.logit_term is LogitTerm.NONE else 4,
    )
    for warning in check_step(est, cfg.train, device):
        log.warning(warning)
