"""FlexAttention for positional encodings that add a bias to the attention logits (ALiBi, T5,
FIRE), and for FoX's forget gate (a bias read from a per-token running sum).

``torch.nn.attention.flex_attention`` adds the bias inside the attention kernel from a
``score_mod`` function and skips the blocks a causal ``BlockMask`` rules out, so no (L x L) bias
or score tensor is ever stored. It is compiled once per process with dynamic shapes, so one
compilation serves every sequence length (an evaluation over 6 lengths compiles once). A
``score_mod`` should capture only tensors (their shapes are fixed here), not Python ints used in
arithmetic: under dynamic shapes those become symbols of the kernel, and torch 2.13's CPU
template misnames some of them in the C++ it emits.

Where it applies: causal attention whose query and key positions both run 0..L-1 (training,
evaluation windows, the prompt of a generation), on CUDA, and on the CPU when no gradient is
needed (torch has no CPU backward for it). Everything else, and ``attention=sdpa``, takes the
SDPA path with an explicit bias in ``posexp.model``. The backend is chosen in ``use_flex``.

Two kernel kinds, each compiled and failing on its own: ``bias`` (position biases, whose
score_mods read tensors of fixed shape) and ``gate`` (FoX: the score_mod reads the running sum c,
(B, H, L), dynamic with the sequence). A kind whose compilation fails falls back to SDPA alone;
the other keeps FlexAttention. Before the gate first trains on a device, ``verify_once`` compares
its gradients with the SDPA path's on that batch (it has not yet been run on a GPU's backward).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger("posexp")

BACKENDS = ("auto", "cpp", "flex", "sdpa")  # cpp: posexp/kernels/cpp_bias.py
ScoreMod = Callable[..., torch.Tensor]  # (score, batch, head, q_idx, kv_idx) -> score

_NAMES = {"gate": "forget gate", "bias": "position bias"}  # the kernel kinds, for messages
_broken: dict[str, str] = {}  # kind -> why compiling failed: later calls go straight to SDPA
_compile_seconds = [0.0]  # wall time of the calls that compiled a kernel, this process


def compile_seconds() -> float:
    """Seconds this process spent in FlexAttention calls that compiled a kernel (timings that
    should not count the compiler subtract the growth of this across what they time)."""
    return _compile_seconds[0]


def _graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def available() -> bool:
    """True when this torch has FlexAttention."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


# torch 2.13's compiled CPU kernel, vectorised 8 floats wide (AVX2, as on most laptops; here
# reproduced by setting inductor's cpp.simdlen to 256), returns wrong numbers (off by O(1), at
# times NaN, varying with the data) for heads of 8 or 16 dimensions at lengths below 128 that are
# 8 mod 16 (8, 24, ..., 120), with or without a score_mod. 512-bit vectors, 32+ dimensions and
# lengths from 128 up matched SDPA at every length 2-300. Lengths below 128 are padded to a
# multiple of 16 on the CPU, which matched at every length with both vector widths: the padded
# keys come after every real query, so the causal mask hides them, and padded queries are dropped.
CPU_PAD_BELOW, CPU_PAD_MULTIPLE = 128, 16


def cpu_padded_length(length: int) -> int:
    """The length the CPU kernel runs a ``length``-token input at (see the note above)."""
    if length >= CPU_PAD_BELOW:
        return length
    return -(-length // CPU_PAD_MULTIPLE) * CPU_PAD_MULTIPLE


def use_flex(
    backend: str, device: torch.device, needs_grad: bool, dropout: float, kind: str = "bias"
) -> bool:
    """The one place that decides between FlexAttention and the SDPA-with-bias path."""
    if backend == "sdpa" or kind in _broken or dropout > 0 or not available():
        return False
    if device.type == "cuda":
        return True
    return device.type == "cpu" and not needs_grad


def describe(backend: str, device: torch.device, kind: str | None) -> str:
    """What attention a run uses, for its log (``kind``: the encoding's kernel kind, or None)."""
    if kind is None:
        return "no bias"
    what = _NAMES[kind]
    if use_flex(backend, device, needs_grad=True, dropout=0.0, kind=kind):
        checked = (
            " (its gradients checked against SDPA's on the first batch)" if kind == "gate" else ""
        )
        return f"flex for the {what}{checked}"
    if use_flex(backend, device, needs_grad=False, dropout=0.0, kind=kind):
        evaluate = f"flex of {GATE_MIN_CPU:,}+ tokens" if kind == "gate" else "flex"
        if backend in ("auto", "cpp"):  # posexp/kernels/cpp_bias.py: the CPU's, for both kinds
            evaluate = f"posexp's C++ kernel (else {evaluate})"
        # Training takes the kernel of the run's next log line (no FlexAttention backward here).
        return f"the {what} added by SDPA or the matmul kernel to train, {evaluate} to evaluate"
    return f"sdpa with an explicit {what} (attention.backend={backend}, device {device.type})"


def _causal(b: Any, h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    return q_idx >= kv_idx


FLEX_TILE = 128  # FlexAttention's default sparse block size: its tiles of queries and keys


@functools.lru_cache(maxsize=16)
def causal_block_mask(length: int, device: str) -> Any:
    """The causal BlockMask for ``length`` queries and keys, built from its block structure.

    ``create_block_mask`` evaluates the mask at every (query, key) pair, an L x L tensor (32 GiB
    at 65,536 tokens). Causality needs no such search: query block i sees key blocks 0..i-1 in
    full and block i through the mask, so the tables are (L/128)^2 integers (1 MiB at 65,536).
    Cached: it depends on nothing else.
    """
    from torch.nn.attention.flex_attention import BlockMask

    n = -(-length // FLEX_TILE)
    blocks = torch.arange(n, dtype=torch.int32, device=device)
    partial_count = torch.ones(1, 1, n, dtype=torch.int32, device=device)
    full_count = blocks.view(1, 1, n).clone()  # row i: key blocks 0..i-1 in full
    every = blocks.view(1, 1, 1, n).expand(1, 1, n, n)
    partial = every.clone()
    partial[0, 0, :, 0] = blocks  # row i's one partial block is block i (the diagonal)
    partial[0, 0, :, 1:] = 0
    if length % FLEX_TILE:
        # The last block row and column hold padding past ``length``: the mask must see all of
        # that row's blocks, as create_block_mask would have it.
        partial[0, 0, -1] = blocks.flip(0)
        partial_count[0, 0, -1], full_count[0, 0, -1] = n, 0
    return BlockMask.from_kv_blocks(
        kv_num_blocks=partial_count,
        kv_indices=partial,
        full_kv_num_blocks=full_count,
        full_kv_indices=every.contiguous(),
        BLOCK_SIZE=FLEX_TILE,
        mask_mod=_causal,
        seq_lengths=(length, length),
    )


def _bias_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, **kw)


def _gate_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    # The same call as _bias_kernel, in a function of its own: torch.compile keeps its graphs,
    # recompilations and failures per function, so one kind cannot switch the other off.
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, **kw)


@functools.cache
def _compiled(kind: str = "bias") -> Callable[..., torch.Tensor]:
    """FlexAttention compiled once per process and kind, dynamic shapes: every length reuses it."""
    kernel = {"bias": _bias_kernel, "gate": _gate_kernel}[kind]
    return torch.compile(kernel, dynamic=True)


def _static_captures(score_mod: ScoreMod) -> None:
    """Fix the shapes of the tensors a score_mod reads (slopes, tables, FIRE's weights).

    Under dynamic=True their sizes would be symbols too, and torch 2.13's CPU template emits C++
    that does not compile once a kernel has ten or more: it renames its block-size symbol (say
    ``ks1``) by plain text replacement, so ``ks10`` becomes an undeclared ``cur_kvSplitSize0``.
    Only the sequence length needs to be dynamic."""

    seen: set[int] = set()

    def mark(value: Any) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            torch._dynamo.mark_static(value)
        elif isinstance(value, (list, tuple)):  # FIRE keeps its units' tensors in a list
            for item in value:
                mark(item)
        elif callable(value):  # a helper the score_mod calls (FIRE's MLP) captures tensors too
            for cell in getattr(value, "__closure__", None) or ():
                mark(cell.cell_contents)

    mark(score_mod)


def flex_causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod: ScoreMod
) -> torch.Tensor | None:
    """softmax(QKᵀ/√d + bias) V under a causal mask, or None if compiling failed (then: SDPA)."""
    if "bias" in _broken:
        return None
    length = q.shape[2]
    q, k, v = _padded(q, k, v)
    _static_captures(score_mod)
    return _run("bias", q, k, v, score_mod, length)


# FoX's forget gate through FlexAttention. On the CPU (no backward there), from this many tokens
# (at 1,024 it is as fast as SDPA with the bias; at 4,096, 1.4x faster in a third of the memory),
# one row at a time: torch 2.13's CPU template compiles the gate's kernel for a batch of one at
# every length tried (48 to 16,384), but for larger batches emits C++ that does not compile at
# some lengths (128, 130, 2,048 with two rows). On a GPU, whole batches, with gradients, once the
# first call with gradients has passed ``verify_once`` (its gradients against SDPA's).
GATE_MIN_CPU = 1024


def use_gate_flex(backend: str, q: torch.Tensor) -> bool:
    """True where FoX's forget gate takes ``flex_gated_attention`` for queries ``q``."""
    if not use_flex(backend, q.device, torch.is_grad_enabled(), 0.0, kind="gate"):
        return False
    return q.device.type != "cpu" or q.shape[2] >= GATE_MIN_CPU


def flex_gated_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: torch.Tensor
) -> torch.Tensor | None:
    """softmax(QKᵀ/√d + c_i − c_j) V under a causal mask, c (B, H, L) a running sum per token
    (FoX's forget gate); None if compiling failed (then: SDPA)."""
    if "gate" in _broken:
        return None
    length = q.shape[2]
    if q.device.type != "cpu":
        return _run("gate", q, k, v, _gate_score(c, copy_for_keys=True), length)
    c = c.float()  # the kernel runs in fp32 on the CPU (_run)
    rows = []
    for i in range(q.shape[0]):  # one row at a time on the CPU (see GATE_MIN_CPU's note)
        qi, ki, vi, ci = _padded(q[i : i + 1], k[i : i + 1], v[i : i + 1], c[i : i + 1])
        # ci is left to the compiler's dynamic shapes: marking its dims dynamic by hand makes
        # torch 2.13's CPU template emit C++ that does not compile.
        rows.append(_run("gate", qi, ki, vi, _gate_score(ci, copy_for_keys=False), length))
        if rows[-1] is None:
            return None
    return torch.cat(rows)


def _gate_score(c: torch.Tensor, copy_for_keys: bool) -> ScoreMod:
    """The score_mod adding c_i − c_j, reading ``c`` (B, H, L)."""
    # FlexAttention's GPU backward accumulates a captured tensor's gradient for one indexing per
    # score only (it refuses a tensor read twice), so there the keys read a copy; both gradients
    # reach c. Not on the CPU (no backward there): a second dynamic tensor makes torch 2.13's CPU
    # template emit C++ that does not compile.
    c_keys = c.clone() if copy_for_keys else c

    def score_mod(score: torch.Tensor, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
        return score + (c[b, h, q_idx] - c_keys[b, h, kv_idx])

    return score_mod


_verified: set[tuple[str, str]] = set()  # (kind, device type) whose gradients matched SDPA's
GRAD_TOLERANCE = {torch.float32: 1e-2, torch.float64: 1e-6}  # else (16-bit): 5e-2; TF32-safe


def verify_once(
    kind: str, device: torch.device, dtype: torch.dtype, gap: Callable[[], float]
) -> bool:
    """Before a kind first trains on a device: ``gap()``, the largest gradient difference against
    the SDPA path relative to the largest gradient, must be within the dtype's tolerance, or the
    kind is switched off for the process (one warning) and SDPA trains instead."""
    if (kind, device.type) in _verified:
        return True
    if kind in _broken:
        return False
    tolerance = GRAD_TOLERANCE.get(dtype, 5e-2)
    try:
        value = gap()
        why = (
            None
            if value <= tolerance
            else f"gradients differ from SDPA's by {value:.1e} of the largest gradient, over the {tolerance:.0e} allowed"
        )
    except Exception as e:  # noqa: BLE001  e.g. a backward the kernel cannot build
        why = _first_line(e)
    if why is not None:
        _broken[kind] = why
        log.warning(
            "FlexAttention off for the %s (%s); using SDPA with an explicit bias", _NAMES[kind], why
        )
        return False
    _verified.add((kind, device.type))
    log.info(
        "FlexAttention's gradients for the %s match SDPA's on %s (%.1e)",
        _NAMES[kind],
        device.type,
        value,
    )
    return True


def _first_line(e: Exception) -> str:
    """An exception as one line of a warning: its type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _padded(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each tensor padded along its sequence dim (2) to the CPU kernel's safe length."""
    length = tensors[0].shape[2]
    padded = cpu_padded_length(length) if tensors[0].device.type == "cpu" else length
    if padded == length:
        return tensors
    return tuple(
        F.pad(t, (0, 0, 0, padded - length) if t.dim() == 4 else (0, padded - length))
        for t in tensors
    )


def _run(
    kind: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    score_mod: ScoreMod,
    length: int,
) -> torch.Tensor | None:
    """The compiled kernel of ``kind`` over (padded) q, k, v, cut to ``length`` queries; None
    (and the kind switched off for the process, with one warning) if compiling fails."""
    dtype, cpu = q.dtype, q.device.type == "cpu"
    if cpu and dtype != torch.float32:
        # On the CPU the kernel runs in fp32, out of autocast (which would hand it bf16): torch
        # 2.13's compiled CPU kernel is slower in bf16, e.g. ALiBi's with 8 heads of 16 dims at
        # 4,096 tokens took 85 ms against 54 in fp32, and casting three (L, d) tensors is cheap.
        q, k, v = q.float(), k.float(), v.float()
    mask = causal_block_mask(q.shape[2], str(q.device))
    # Batch and length vary together in an evaluation (a token budget per batch): dynamic from
    # the first call, so a new length reuses the kernel (sizes 1 still get their own).
    for t in (q, k, v):
        torch._dynamo.maybe_mark_dynamic(t, 0)
        torch._dynamo.maybe_mark_dynamic(t, 2)
    graphs, start = _graphs_compiled(), time.perf_counter()
    if graphs == 0:  # the first call freezes for seconds: say why before it does
        log.info("compiling FlexAttention for the attention bias (once per process and dtype)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on CPU support; not the user's concern
            with torch.autocast("cpu", enabled=False) if cpu else contextlib.nullcontext():
                out = _compiled(kind)(q, k, v, score_mod=score_mod, block_mask=mask)
            out = out[:, :, :length].to(dtype)
        if _graphs_compiled() > graphs:
            took = time.perf_counter() - start
            _compile_seconds[0] += took
            log.info(
                "FlexAttention compiled in %.1f s (%s)", took, str(q.dtype).removeprefix("torch.")
            )
        return out
    except Exception as e:  # noqa: BLE001  e.g. no C++ compiler for the CPU kernel
        _broken[kind] = _first_line(e)
        log.warning(
            "FlexAttention unavailable here for the %s (%s); using SDPA with an explicit bias",
            _NAMES[kind],
            _broken[kind],
        )
        return None
