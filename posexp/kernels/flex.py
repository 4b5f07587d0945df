"""FlexAttention for positional encodings that add a bias to the attention logits (ALiBi, T5,
FIRE).

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
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger("posexp")

BACKENDS = ("auto", "flex", "sdpa")
ScoreMod = Callable[..., torch.Tensor]  # (score, batch, head, q_idx, kv_idx) -> score

_broken: list[str] = []  # set once when compiling fails, so later calls go straight to SDPA
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


def use_flex(backend: str, device: torch.device, needs_grad: bool, dropout: float) -> bool:
    """The one place that decides between FlexAttention and the SDPA-with-bias path."""
    if backend == "sdpa" or _broken or dropout > 0 or not available():
        return False
    if device.type == "cuda":
        return True
    return device.type == "cpu" and not needs_grad


def describe(backend: str, device: torch.device, has_bias: bool) -> str:
    """What attention a run uses, for its log."""
    if not has_bias:
        return "sdpa (no bias)"
    if use_flex(backend, device, needs_grad=True, dropout=0.0):
        return "flex"
    if use_flex(backend, device, needs_grad=False, dropout=0.0):
        return "sdpa with the bias while training (no FlexAttention backward on this device), flex to evaluate"
    return f"sdpa with an explicit bias (attention.backend={backend}, device {device.type})"


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


@functools.cache
def _compiled() -> Callable[..., torch.Tensor]:
    """FlexAttention compiled once per process, dynamic shapes: every length and PE reuse it."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True)


def _static_captures(score_mod: ScoreMod) -> None:
    """Fix the shapes of the tensors a score_mod reads (slopes, tables, FIRE's weights).

    Under dynamic=True their sizes would be symbols too, and torch 2.13's CPU template emits C++
    that does not compile once a kernel has ten or more: it renames its block-size symbol (say
    ``ks1``) by plain text replacement, so ``ks10`` becomes an undeclared ``cur_kvSplitSize0``.
    Only the sequence length needs to be dynamic."""

    def mark(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            torch._dynamo.mark_static(value)
        elif isinstance(value, (list, tuple)):  # FIRE keeps its units' tensors in a list
            for item in value:
                mark(item)

    for cell in score_mod.__closure__ or ():
        mark(cell.cell_contents)


def flex_causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod: ScoreMod
) -> torch.Tensor | None:
    """softmax(QKᵀ/√d + bias) V under a causal mask, or None if compiling failed (then: SDPA)."""
    if _broken:
        return None
    length = q.shape[2]
    padded = cpu_padded_length(length) if q.device.type == "cpu" else length
    if padded != length:
        q, k, v = (F.pad(t, (0, 0, 0, padded - length)) for t in (q, k, v))
    mask = causal_block_mask(padded, str(q.device))
    _static_captures(score_mod)
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
            out = _compiled()(q, k, v, score_mod=score_mod, block_mask=mask)[:, :, :length]
        if _graphs_compiled() > graphs:
            took = time.perf_counter() - start
            _compile_seconds[0] += took
            log.info(
                "FlexAttention compiled in %.1f s (%s)", took, str(q.dtype).removeprefix("torch.")
            )
        return out
    except Exception as e:  # noqa: BLE001  e.g. no C++ compiler for the CPU kernel
        _broken.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        log.warning(
            "FlexAttention unavailable here (%s); using SDPA with an explicit bias", _broken[0]
        )
        return None
