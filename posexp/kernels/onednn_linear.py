"""Linear layers in fp32 on a CPU through oneDNN instead of torch's default BLAS.

torch multiplies fp32 matrices on a CPU with MKL. On AMD CPUs MKL runs its AVX2 code, while
oneDNN (also inside torch, the library its bf16 matmuls already use) runs AVX-512: on a 2-core
AMD EPYC (Zen 5), a training-shaped fp32 matmul (8192 x 128 times 128 x 512) ran at about 210
GFLOP/s through MKL and 450-500 through oneDNN, with the same fp32 arithmetic (the same error
against fp64). torch exposes that path only as ``torch.ops.mkldnn._linear_pointwise``, an
inference op without a backward, so ``OneDNNLinear`` supplies one: the input's gradient is a
second forward-shaped product (dY W), and the weight's (dYᵀ X) takes a transposed copy of the
narrower operand, as oneDNN wants its first operand row-major.

The path is taken only where it applies (fp32 on a CPU, autocast off) and where the run chose it
(``train.linear``; ``auto`` times both kernels at the run's shape, ``posexp.runtime.kernel_choice``):
on an Intel CPU MKL may be as fast, and then nothing changes.
"""

from __future__ import annotations

import functools
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

KERNELS = ("torch", "onednn")
CHOICES = ("auto", *KERNELS)
# oneDNN's call costs 15-20 us more than torch's: below about this many multiply-adds a product
# runs faster on torch (on the development CPU, in fp32: d_model 64 at about 200 rows, 128 at
# about 40, 768 always), as a token-by-token generation at a small width does.
MIN_MACS = 1 << 22


@functools.cache
def available() -> bool:
    """Whether this torch has oneDNN's linear op and it computes a product correctly."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        a, b = torch.arange(6.0).view(2, 3), torch.arange(12.0).view(4, 3)
        return bool(torch.equal(_times_transposed(a, b), a @ b.t()))
    except (AttributeError, RuntimeError, TypeError):  # no such op, or another signature
        return False


def applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True where oneDNN may compute ``x Wᵀ``: fp32 operands on a CPU, autocast off, and a
    product of at least ``MIN_MACS`` multiply-adds."""
    return (
        x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and x.numel() > 0
        and x.numel() * weight.shape[0] >= MIN_MACS
        and not torch.is_autocast_enabled("cpu")
        and available()
    )


def _times_transposed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a bᵀ by oneDNN, for a (M, K) with unit stride along K and b (N, K) of any strides."""
    return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")


class OneDNNLinear(torch.autograd.Function):
    """y = x Wᵀ without a bias, forward and backward by oneDNN."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        """x (..., in) times Wᵀ (in, out)."""
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        ctx.save_for_backward(rows, weight)
        ctx.shape = x.shape
        return _times_transposed(rows, weight).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:  # noqa: ANN001
        """dX = dY W and dW = dYᵀ X."""
        rows, weight = ctx.saved_tensors
        dy = grad.reshape(-1, weight.shape[0]).contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = _times_transposed(dy, weight.t()).view(ctx.shape)
        if ctx.needs_input_grad[1]:
            # oneDNN reads its first operand row by row: transpose whichever of dY, X is narrower.
            if dy.shape[1] <= rows.shape[1]:
                dw = _times_transposed(dy.t().contiguous(), rows.t())
            else:
                dw = _times_transposed(rows.t().contiguous(), dy.t()).t()
        return dx, dw


def linear(x: torch.Tensor, weight: torch.Tensor, kernel: str = "torch") -> torch.Tensor:
    """x Wᵀ by ``kernel`` where it applies (``applies``), else by torch."""
    if kernel == "onednn" and applies(x, weight):
        return OneDNNLinear.apply(x, weight)
    return F.linear(x, weight)


class Linear(nn.Linear):
    """``nn.Linear`` without a bias whose product runs on ``kernel`` (the same state dict)."""

    def __init__(self, in_features: int, out_features: int, kernel: str = "torch") -> None:
        super().__init__(in_features, out_features, bias=False)
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x Wᵀ."""
        return linear(x, self.weight, self.kernel)


def measure_speedup(rows: int, d_model: int, hidden: int, reps: int = 5) -> float:
    """torch's time over oneDNN's for one fp32 forward and backward of a (rows x d_model) input
    through the MLP's two layers (d_model -> hidden -> d_model), the medians of ``reps``
    interleaved rounds after one to warm up; 0.0 where oneDNN's op is missing. The inputs come
    from a generator of their own, so the run's random stream is not touched."""
    if not available():
        return 0.0
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, d_model, generator=g).requires_grad_()
    up = torch.randn(hidden, d_model, generator=g).requires_grad_()
    down = torch.randn(d_model, hidden, generator=g).requires_grad_()
    probe = torch.randn(rows, d_model, generator=g)  # the output's gradient, as a model's arrives
    times: dict[str, list[float]] = {kernel: [] for kernel in KERNELS}
    with torch.enable_grad():
        for rep in range(reps + 1):
            for kernel in KERNELS if rep % 2 else KERNELS[::-1]:
                start = time.perf_counter()
                linear(linear(x, up, kernel), down, kernel).backward(probe)
                x.grad = up.grad = down.grad = None
                if rep:  # the first round warms up
                    times[kernel].append(time.perf_counter() - start)
    return statistics.median(times["torch"]) / statistics.median(times["onednn"])
