"""Attention, and the one place that picks its kernel (``attend``, over ``BACKENDS``).

The kernels: torch's SDPA (with an encoding's position bias added one chunk of queries at a
time), FlexAttention (``posexp/kernels/flex.py``: the bias inside the kernel), the explicit softmax
that also returns the weights (attention maps, and the reference the tests compare SDPA
against), the softmax over scores with a term computed from them (CoPE), the two-position
attention of the training-free methods that remap relative positions, windows and sinks one
block of queries at a time over the keys it may see (a sink logit and a method's sinks joined
through the kernel's log-sum-exp, ``posexp/kernels/lse_attention.py``), and blockwise causal
attention (its blocks are the method's; query chunks are this module's unit of work, and
FlexAttention's tiles are its own). Which one runs follows from what the encoding adds to the
logits (``PositionalEncoding.logit_term``), the training-free method's plan, whether the
caller wants the weights, and the kernels the run chose (``KernelChoice``, made at the edge)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posexp.errors import PosexpError
from posexp.extension.attention import AttentionPlan
from posexp.kernels import cpp_bias, flex, lse_attention, matmul_attention
from posexp.kernels.choice import KernelChoice
from posexp.model import doc_mask, near_far
from posexp.model.window_blocks import (
    BlockMasks,
    banded_attention_lse,
    block_keys,
    softmax_with_sink,
    window_mask,
)
from posexp.pe import LogitTerm, PositionalEncoding

# Queries are processed in chunks of this many when an additive bias goes through SDPA, so a long
# evaluation never holds a full (H, L, L) bias or score tensor, and each chunk attends only to
# the keys up to its end: SDPA cannot combine is_causal with a bias, and a full masked square
# costs about 2x the causal kernel. At 128 the masked work left is small (CPU training at seq
# 256: bias PEs at 0.93-1.0x RoPE's step rate, against 0.83x with chunks of 512).
QUERY_CHUNK = 128


BiasKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "torch.Tensor | None"]
Attended = tuple[torch.Tensor, "torch.Tensor | None"]


def bias_kernel_for(
    pe: PositionalEncoding, length: int, backend: str, device: torch.device, dropout: float
) -> BiasKernel | None:
    """Causal attention (q, k, v) -> output with ``pe``'s bias added inside the kernel, for
    queries and keys at 0..length-1, or None (SDPA with an explicit bias): posexp's CPU kernel
    where it runs (evaluation on the CPU, ``attention.backend`` auto or cpp), else FlexAttention
    where it runs (``flex.use_flex``); each returns None where it cannot, and the next is tried."""
    grad = torch.is_grad_enabled()
    by_distance = (
        pe.distance_bias(length, device)
        if cpp_bias.wanted(backend, device, grad, dropout)
        else None
    )
    score_mod = pe.score_mod(length) if flex.use_flex(backend, device, grad, dropout) else None
    if device.type == "cpu" and pe.far_bias() is not None:
        # A bias constant past some distance (T5) runs faster through near_far than through
        # the CPU's FlexAttention: attend_all takes it when this kernel gives up.
        score_mod = None
    if by_distance is None and score_mod is None:
        return None

    def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
        y = None
        if by_distance is not None:
            y = cpp_bias.causal_attention(
                q, k, v, by_distance.table, by_distance.row_scale, by_distance.piecewise
            )
        if y is None and score_mod is not None:
            y = flex.flex_causal_attention(q, k, v, score_mod)  # None: compiling failed
        return y

    return kernel


@dataclass(frozen=True)
class AttentionCall:
    """One causal attention: (rotated) ``q``, ``k`` (B, H, T, d) over ``v`` at their positions,
    under ``pe``; ``plan``: a training-free method's change to attention; ``bias_kernel``: the
    bias inside a kernel, where the model built one for this forward; ``kernels``: the run's."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    pe: PositionalEncoding
    plan: AttentionPlan | None = None
    need_weights: bool = False
    bias_kernel: BiasKernel | None = None
    dropout: float = 0.0
    kernels: KernelChoice = KernelChoice()
    # The layer's local attention: its last ``window`` keys, the first ``sinks`` positions, a
    # learned logit per head (H,) that absorbs mass (``windowed_attention``).
    window: int | None = None
    sinks: int = 0
    sink_logit: torch.Tensor | None = None

    @property
    def local(self) -> tuple[int | None, int, torch.Tensor | None]:
        """The layer's window, sinks and sink logit, as the kernels of the methods take them."""
        return (self.window, self.sinks, self.sink_logit)

    @property
    def aligned(self) -> bool:
        """Queries and keys at the same positions, shared by the batch (training, evaluation)."""
        return (
            self.q_pos.dim() == 1 and self.k_pos.dim() == 1 and self.q.shape[2] == self.k.shape[2]
        )

    @property
    def span(self) -> int:
        """How far apart the farthest query and key are, plus one: a window this wide or wider
        hides nothing."""
        return int(self.q_pos.max()) - int(self.k_pos.min()) + 1

    def part(self, queries: slice, keys: slice) -> AttentionCall:
        """The same call over a slice of the queries and one of the keys (a chunk, a block)."""
        return dataclasses.replace(
            self,
            q=self.q[:, :, queries],
            k=self.k[:, :, keys],
            v=self.v[:, :, keys],
            q_pos=self.q_pos[queries],
            k_pos=self.k_pos[keys],
        )


@dataclass(frozen=True)
class Backend:
    """One way to run attention: ``runs(call)`` says whether it takes the call, ``run(call)``
    gives the output and weights, or None where it gave up (the next backend is tried)."""

    name: str
    runs: Callable[[AttentionCall], bool]
    run: Callable[[AttentionCall], Attended | None]


def attend(call: AttentionCall) -> Attended:
    """The model's one attention entry point: within chunks when the encoding attends locally
    (``attention_chunk``), else the first of ``BACKENDS`` that takes the call and runs it.
    Returns the output and the weights (None unless asked for)."""
    if call.pe.attention_chunk is not None:
        return chunked_attention(call)
    return attend_all(call)


def attend_all(call: AttentionCall) -> Attended:
    """``call`` by the first of ``BACKENDS`` that takes it and runs it."""
    for backend in BACKENDS:
        if backend.runs(call):
            out = backend.run(call)
            if out is not None:
                return out
    raise AssertionError("sdpa takes every call")  # pragma: no cover


def chunked_attention(call: AttentionCall) -> Attended:
    """Causal attention in which a query at p sees only the keys of chunk ⌊p/chunk⌋ (iRoPE):
    one ``attend_all`` call per chunk over at most ``chunk`` keys, so no score outlives it."""
    chunk, q_pos, k_pos = call.pe.attention_chunk, call.q_pos, call.k_pos
    if q_pos.dim() != 1 or k_pos.dim() != 1:
        raise PosexpError("pe.chunk needs positions shared by the batch (1-D)")

    def spans(positions: torch.Tensor) -> dict[int, tuple[int, int]]:
        # Sorted positions: each chunk is one run, (start, end) in the sequence.
        ids, counts = torch.unique_consecutive(positions // chunk, return_counts=True)
        ends = counts.cumsum(0).tolist()
        return {n: (e - c, e) for n, c, e in zip(ids.tolist(), counts.tolist(), ends, strict=True)}

    keys = spans(k_pos)
    q, k = call.q, call.k
    outputs, weights = [], q.new_zeros(*q.shape[:3], k.shape[2]) if call.need_weights else None
    # Chunks of the encoding's, not of the run's: no bias kernel and no dropout inside them.
    local = dataclasses.replace(call, bias_kernel=None, dropout=0.0)
    for n, (qa, qz) in spans(q_pos).items():
        ka, kz = keys[n]  # the cache holds every position up to the last query
        y, w = attend_all(local.part(slice(qa, qz), slice(ka, kz)))
        outputs.append(y)
        if weights is not None:
            weights[:, :, qa:qz, ka:kz] = w
    return torch.cat(outputs, dim=2), weights


def _blockwise(c: AttentionCall) -> Attended:
    assert c.plan is not None and c.plan.block is not None
    return block_local_attention(
        c.q,
        c.k,
        c.v,
        c.q_pos,
        c.k_pos,
        c.pe,
        c.plan.block,
        c.need_weights,
        c.local,
    )


def _classed(c: AttentionCall) -> Attended:
    assert c.plan is not None
    return classed_attention(
        c.q,
        c.k,
        c.v,
        c.q_pos,
        c.k_pos,
        c.plan,
        c.pe.rotate_at,
        c.need_weights,
        c.local,
    )


def _remapped(c: AttentionCall) -> Attended:
    assert c.plan is not None
    return remapped_attention(
        c.q,
        c.k,
        c.v,
        c.q_pos,
        c.k_pos,
        c.plan,
        c.pe.rotate_at,
        c.need_weights,
        c.local,
    )


def _windowed_runs(c: AttentionCall) -> bool:
    # A window no wider than the farthest pair leaves attention as it is: the call goes on to
    # the kernels of full attention, so a window >= L gives exactly their output.
    if c.sink_logit is not None:
        return True
    return c.window is not None and c.window < c.span


def _banded_runs(c: AttentionCall) -> bool:
    # A method's window and sinks (StreamingLLM, LM-Infinite) over a whole sequence, under the
    # layer's own window, sinks and sink logit.
    return (
        c.plan is not None and c.plan.window_sinks is not None and not c.need_weights and c.aligned
    )


def _banded(c: AttentionCall) -> Attended:
    assert c.plan is not None
    return banded_classes(c.q, c.k, c.v, c.q_pos, c.plan, c.pe.rotate_at, c.local), None


def _windowed(c: AttentionCall) -> Attended:
    return windowed_attention(
        c.q,
        c.k,
        c.v,
        c.q_pos,
        c.k_pos,
        c.pe,
        c.window,
        c.sinks,
        c.sink_logit,
        c.dropout,
        c.need_weights,
    )


def _near_far_runs(c: AttentionCall) -> bool:
    far = c.pe.far_bias() if c.pe.has_bias else None
    return far is not None and near_far.applies(c.q, c.k, c.v, c.q_pos, c.k_pos, far[1])


def _near_far(c: AttentionCall) -> Attended:
    far, pe, q = c.pe.far_bias(), c.pe, c.q
    assert far is not None
    scaled = q / math.sqrt(q.shape[-1])
    y = near_far.attention(
        scaled, c.k, scaled, c.k, c.v, far[0], lambda qp, kp: pe.bias(qp, kp, q.dtype), far[1]
    )
    return y, None


def _matmul_runs(c: AttentionCall) -> bool:
    return (
        c.kernels.causal == "matmul"
        and c.q.shape[2] == c.k.shape[2]
        and c.q_pos.dim() == 1
        and matmul_attention.applies(c.q)
    )


def _matmul(c: AttentionCall) -> Attended:
    bias = c.pe.bias(c.q_pos, c.k_pos, c.q.dtype) if c.pe.has_bias else None
    return matmul_attention.causal_attention(c.q, c.k, c.v, c.dropout, bias), None


def _documents_runs(c: AttentionCall) -> bool:
    docs = doc_mask.current()
    return docs is not None and docs.shape[-1] == c.k.shape[2] == c.q.shape[2]


def _documents(c: AttentionCall) -> Attended:
    docs = doc_mask.current()
    bias = c.pe.bias(c.q_pos, c.k_pos, c.q.dtype) if c.pe.has_bias else None
    mm = c.kernels.causal == "matmul" and matmul_attention.applies(c.q)
    y = doc_mask.attention(
        c.q, c.k, c.v, docs, bias, c.dropout, matmul_attention.causal_attention if mm else None
    )
    return y, None


def _bias_kernel(c: AttentionCall) -> Attended | None:
    assert c.bias_kernel is not None
    y = c.bias_kernel(c.q, c.k, c.v)  # None: no kernel could run it
    return None if y is None else (y, None)


# In order, the first that takes a call and runs it: a training-free method's plan (blockwise
# causal attention, a window plus sinks over a whole sequence, pairs by class, then remapped
# positions), a logit term computed from the scores (CoPE), a
# sliding window or a sink logit (banded, query block by query block), the documents of a
# doc-masked training row kept apart (``doc_mask``), the weights asked for (explicit softmax), a
# position bias inside a kernel (when the model built
# one), a bias constant past some distance split into near and far parts (``near_far``), the
# matmul kernel where the run chose it for training in 16-bit
# (``posexp/kernels/matmul_attention.py``), else SDPA (the bias, if any, added chunk by chunk).
BACKENDS: tuple[Backend, ...] = (
    Backend("blockwise", lambda c: c.plan is not None and c.plan.block is not None, _blockwise),
    Backend("banded", _banded_runs, _banded),
    Backend("classed", lambda c: c.plan is not None and c.plan.classes is not None, _classed),
    Backend("remapped", lambda c: c.plan is not None and c.plan.remaps_positions, _remapped),
    Backend(
        "content",
        lambda c: c.pe.logit_term is LogitTerm.FROM_SCORES,
        lambda c: content_attention(c.q, c.k, c.v, c.q_pos, c.k_pos, c.pe, c.need_weights),
    ),
    Backend("windowed", _windowed_runs, _windowed),
    Backend("documents", _documents_runs, _documents),
    Backend(
        "explicit",
        lambda c: c.need_weights,
        lambda c: explicit_attention(c.q, c.k, c.v, c.q_pos, c.k_pos, c.pe),
    ),
    Backend("bias kernel", lambda c: c.bias_kernel is not None, _bias_kernel),
    Backend("near_far", _near_far_runs, _near_far),
    Backend("matmul", _matmul_runs, _matmul),
    Backend(
        "sdpa",
        lambda c: True,
        lambda c: (sdpa_attention(c.q, c.k, c.v, c.q_pos, c.k_pos, c.pe, c.dropout), None),
    ),
)


def causal_mask(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """True where query i may see key j (j's position <= i's); broadcastable to (B, H, Tq, Tk)."""
    mask = k_pos[..., None, :] <= q_pos[..., :, None]
    return mask[:, None] if mask.dim() == 3 else mask


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    pe: PositionalEncoding,
    dropout: float = 0.0,
    causal: bool = True,
) -> torch.Tensor:
    """Scaled dot-product attention through torch's SDPA kernels (causal unless told otherwise)."""
    Tq, Tk = q.shape[2], k.shape[2]
    if not causal:
        bias = pe.bias(q_pos, k_pos, q.dtype) if pe.has_bias else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
    if not pe.has_bias:
        if Tq == Tk and q_pos.dim() == 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_mask(q_pos, k_pos), dropout_p=dropout
        )
    # With a bias: one query chunk at a time, each seeing only the keys it may attend to.
    outputs = []
    for start in range(0, Tq, QUERY_CHUNK):
        qp = q_pos[..., start : start + QUERY_CHUNK]
        k_end = Tk if q_pos.dim() > 1 or Tq != Tk else min(Tk, start + QUERY_CHUNK)
        kp = k_pos[..., :k_end]
        bias = pe.bias(qp, kp, q.dtype).masked_fill(~causal_mask(qp, kp), float("-inf"))
        outputs.append(
            F.scaled_dot_product_attention(
                q[:, :, start : start + QUERY_CHUNK],
                k[:, :, :k_end],
                v[:, :, :k_end],
                attn_mask=bias,
                dropout_p=dropout,
            )
        )
    return torch.cat(outputs, dim=2)


def windowed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    pe: PositionalEncoding,
    window: int | None,
    sinks: int = 0,
    sink_logit: torch.Tensor | None = None,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal attention in which a query sees its last ``window`` keys and the first ``sinks``
    positions (``window_mask``), the encoding's bias added, and with a per-head ``sink_logit``
    (H,) an extra logit that takes part in the softmax and contributes no value (gpt-oss).

    One block of ``QUERY_CHUNK`` queries at a time; where queries and keys share positions
    0..T-1 a block gathers only the keys it may see (its sinks and its band of at most
    window + block - 1 keys), so training and evaluation hold O(L·(W + N)) scores, not O(L²).
    Without a sink logit or weights asked for, each block runs through SDPA with its mask; with
    a sink logit, through the same kernel returning its log-sum-exp, rescaled by
    σ(lse − sink) (``lse_attention``); a full layer (no window) without a bias in one call."""
    Tq, Tk = q.shape[2], k.shape[2]
    aligned = q_pos.dim() == 1 and k_pos.dim() == 1 and Tq == Tk
    bias_of = (lambda qp, kp: pe.bias(qp, kp, q.dtype)) if pe.has_bias else None
    if aligned and not need_weights and sink_logit is not None:
        if window is not None and window >= int(q_pos.max() - q_pos.min()) + 1:
            window = None  # it hides nothing: one causal call
        if window is None and not pe.has_bias and lse_attention.flash_runs(q, None, dropout):
            # One causal kernel call; written out, it would hold (T, T) scores: blocks instead.
            out, lse = lse_attention.attention_lse(q, k, v, causal=True, dropout=dropout)
            return lse_attention.merge_extra_logits(out, lse, sink_logit=sink_logit), None
        out, lse = banded_attention_lse(
            q, k, v, q_pos, bias_of, window, sinks, dropout, QUERY_CHUNK, pe.bias_by_distance
        )
        return lse_attention.merge_extra_logits(out, lse, sink_logit=sink_logit), None
    n_sinks = int((k_pos < sinks).sum()) if aligned and sinks and window is not None else 0
    masks = BlockMasks(q_pos if aligned else None, window, sinks, bias_of, pe.bias_by_distance)
    scale = 1.0 / math.sqrt(q.shape[-1])
    outputs = []
    weights = q.new_zeros(*q.shape[:3], Tk) if need_weights else None
    for start in range(0, Tq, QUERY_CHUNK):
        end = min(start + QUERY_CHUNK, Tq)
        qb, qp = q[:, :, start:end], q_pos[..., start:end]
        if aligned:
            idx, kb, vb, kp = block_keys(k, v, k_pos, start, end, window, n_sinks)
        else:
            idx, kb, vb, kp = None, k, v, k_pos
        if sink_logit is None and not need_weights:
            mask = masks.get(qp, kp, None if bias_of is None else q.dtype)
            outputs.append(
                F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, dropout_p=dropout)
            )
            continue
        scores = (qb * scale) @ kb.transpose(-2, -1)
        if bias_of is not None:
            scores = scores + bias_of(qp, kp)
        scores = scores.masked_fill(~masks.get(qp, kp, None), float("-inf"))
        probs = softmax_with_sink(scores, sink_logit)
        if weights is not None:
            if idx is None:
                weights[:, :, start:end] = probs
            else:
                weights[:, :, start:end].index_copy_(-1, idx, probs.to(weights.dtype))
        if dropout:
            probs = F.dropout(probs, dropout)
        outputs.append(probs.to(vb.dtype) @ vb)
    return torch.cat(outputs, dim=2), weights


def banded_classes(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos: torch.Tensor,
    plan: AttentionPlan,
    rotate_at: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    local: tuple[int | None, int, torch.Tensor | None] = (None, 0, None),
) -> torch.Tensor:
    """``classed_attention`` for a plan whose classes are a window and sinks
    (``plan.window_sinks`` = (W, S)), over unrotated ``q``, ``k`` at the same positions ``pos``,
    under the layer's ``local`` window, sinks and sink logit: the band of keys both windows
    keep, rotated at their own positions (``banded_attention_lse``, with its log-sum-exp); the
    first keys (the method's sinks, the layer's) wherever else either keeps them, scored
    apart (at their own positions within W, at ``plan.rotations[0]``'s beyond); joined in one
    softmax with the sink logit (``lse_attention.merge_extra_logits``). O(T·(W + S)) scores,
    where the classes would be O(T²)."""
    assert plan.window_sinks is not None
    window, sinks = plan.window_sinks
    layer_window, layer_sinks, sink_logit = local
    band = window if layer_window is None else min(window, layer_window)
    q_own, k_own = rotate_at(q, pos), rotate_at(k, pos)
    out, lse = banded_attention_lse(q_own, k_own, v, pos, None, band, block=QUERY_CHUNK)
    first = max(sinks, layer_sinks) if layer_window is not None else sinks
    keys = (pos < first).nonzero().flatten()
    distance = pos[:, None] - pos[None, keys]
    seen = (distance >= band) & ((distance < window) | (pos[keys] < sinks))
    if layer_window is not None:
        seen &= (distance < layer_window) | (pos[keys] < layer_sinks)
    if not bool(seen.any()):  # the band holds every key anyone sees
        if sink_logit is None:
            return out
        return lse_attention.merge_extra_logits(out, lse, sink_logit=sink_logit)
    scale = 1.0 / math.sqrt(q.shape[-1])
    q_pos_far, k_pos_far = plan.rotations[0](pos, pos)
    q_far = rotate_at(q, q_pos_far) * scale
    k_far = rotate_at(k.index_select(2, keys), k_pos_far[keys])
    scores = q_far @ k_far.transpose(-2, -1)
    if bool((seen & (distance < window)).any()):  # a layer's sink within the method's window
        own = (q_own * scale) @ k_own.index_select(2, keys).transpose(-2, -1)
        scores = torch.where(distance < window, own, scores)
    scores = scores.masked_fill(~seen, float("-inf"))
    return lse_attention.merge_extra_logits(
        out, lse, scores, v.index_select(2, keys), sink_logit=sink_logit
    )


def explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    pe: PositionalEncoding,
    causal: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QKᵀ/√d_k + bias) V written out, returning the weights too (for attention maps)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if pe.has_bias:
        scores = scores + pe.bias(q_pos, k_pos, scores.dtype)
    if causal:
        scores = scores.masked_fill(~causal_mask(q_pos, k_pos), float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def remapped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    plan: AttentionPlan,
    rotate_at: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    need_weights: bool = False,
    local: tuple[int | None, int, torch.Tensor | None] = (None, 0, None),
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal attention over unrotated ``q``, ``k`` where pairs closer than ``plan.window`` are
    rotated at their positions and the others at ``plan.far``'s (Self-Extend, ReRoPE), in one
    softmax, one chunk of queries at a time (no L x L tensor at long lengths).

    A chunk's scores come from the far rotation for every key up to its end, then the last
    ``window`` keys (the only ones that can be near) are rescored with the own rotation where
    their distance says so. Written out rather than through SDPA: a pair takes one of two
    scores, which SDPA can only express with a doubled head dim and a dense mask (measured
    1.4x slower on the CPU, scripts/bench_eval.py).
    """
    window, scale = plan.window, 1.0 / math.sqrt(q.shape[-1])
    far_q_pos, far_k_pos = plan.far(q_pos, k_pos)
    # The scale goes on the queries: one pass over (T, d) instead of one over each chunk's scores.
    q_own, k_own = rotate_at(q, q_pos) * scale, rotate_at(k, k_pos)
    q_far, k_far = rotate_at(q, far_q_pos) * scale, rotate_at(k, far_k_pos)
    windowed, sink = local[0] is not None, local[2]
    if (
        not need_weights
        and not windowed
        and sink is None
        and near_far.applies(q, k, v, q_pos, k_pos)
    ):
        return near_far.attention(q_own, k_own, q_far, k_far, v, window), None

    def probabilities(start: int, end: int, k_end: int, aligned: bool) -> torch.Tensor:
        # Every key before the chunk's band of `window` keys is far (and visible) when positions
        # are aligned; otherwise (a KV cache, per-row positions) the band is every key.
        band_from = max(0, start - window + 1) if aligned else 0
        scores = q_far[:, :, start:end] @ k_far[:, :, :k_end].transpose(-2, -1)
        distance = q_pos[..., start:end, None] - k_pos[..., None, band_from:k_end]
        if distance.dim() == 3:  # per-row positions: a head axis
            distance = distance[:, None]
        band = scores[..., band_from:]
        own = q_own[:, :, start:end] @ k_own[:, :, band_from:k_end].transpose(-2, -1)
        band.copy_(torch.where(distance < window, own, band))
        band.masked_fill_(distance < 0, float("-inf"))
        if windowed:  # the layer's own window and sinks (attention.window) on top
            seen = window_mask(q_pos[..., start:end], k_pos[..., :k_end], *local[:2])
            scores = scores.masked_fill(~seen, float("-inf"))
        return softmax_with_sink(scores, sink)

    return chunked_softmax(q, k, v, q_pos, k_pos, probabilities, need_weights)


def classed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    plan: AttentionPlan,
    rotate_at: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    need_weights: bool = False,
    local: tuple[int | None, int, torch.Tensor | None] = (None, 0, None),
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal attention over unrotated ``q``, ``k`` where each pair's class
    (``plan.classes``) picks its score: class 0 rotated at the pair's own positions, class n at
    ``plan.rotations[n - 1]``'s, class -1 hidden; one softmax, one chunk of queries at a time."""
    assert plan.classes is not None
    scale = 1.0 / math.sqrt(q.shape[-1])
    rotated = [(rotate_at(q, q_pos) * scale, rotate_at(k, k_pos))]
    for positions in plan.rotations:
        qp, kp = positions(q_pos, k_pos)
        rotated.append((rotate_at(q, qp) * scale, rotate_at(k, kp)))

    def probabilities(start: int, end: int, k_end: int, aligned: bool) -> torch.Tensor:
        qp, kp = q_pos[..., start:end], k_pos[..., :k_end]
        kind = plan.classes(qp, kp)
        kind = kind.masked_fill(~window_mask(qp, kp, *local[:2]).reshape(kind.shape), -1)
        if kind.dim() == 3:  # per-row positions: a head axis
            kind = kind[:, None]
        scores = torch.full(
            (*q.shape[:2], end - start, k_end), float("-inf"), dtype=q.dtype, device=q.device
        )
        for n, (qr, kr) in enumerate(rotated):
            if bool((kind == n).any()):
                own = qr[:, :, start:end] @ kr[:, :, :k_end].transpose(-2, -1)
                scores = torch.where(kind == n, own, scores)
        return softmax_with_sink(scores, local[2])

    return chunked_softmax(q, k, v, q_pos, k_pos, probabilities, need_weights)


def block_local_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    pe: PositionalEncoding,
    block: int,
    need_weights: bool = False,
    local: tuple[int | None, int, torch.Tensor | None] = (None, 0, None),
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal attention in which a query at position p sees only the keys of blocks
    ⌊p/block⌋ − 1 and ⌊p/block⌋ (Sun et al. 2022): one attention call (``attend``, no plan) per
    block of queries over its at most 2·block keys, so the work grows linearly with the length."""
    if q_pos.dim() != 1 or k_pos.dim() != 1:
        raise PosexpError("extension=blockwise needs positions shared by the batch (1-D)")
    q_block, k_block = (
        q_pos.div(block, rounding_mode="floor"),
        k_pos.div(block, rounding_mode="floor"),
    )
    outputs = []
    weights = q.new_zeros(*q.shape[:3], k.shape[2]) if need_weights else None
    for n in torch.unique_consecutive(q_block).tolist():
        rows = (q_block == n).nonzero().flatten()
        keys = ((k_block >= n - 1) & (k_block <= n)).nonzero().flatten()
        qa, qz, ka, kz = int(rows[0]), int(rows[-1]) + 1, int(keys[0]), int(keys[-1]) + 1
        y, w = attend(
            AttentionCall(
                q[:, :, qa:qz],
                k[:, :, ka:kz],
                v[:, :, ka:kz],
                q_pos[qa:qz],
                k_pos[ka:kz],
                pe,
                need_weights=need_weights,
                window=local[0],
                sinks=local[1],
                sink_logit=local[2],
            )
        )  # the kernel the encoding needs (and the layer's window), within the block
        outputs.append(y)
        if weights is not None:
            weights[:, :, qa:qz, ka:kz] = w
    return torch.cat(outputs, dim=2), weights


def content_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    pe: PositionalEncoding,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal attention whose logits get a term computed from the scores themselves
    (``pe.score_bias``, CoPE), one block of queries at a time (no L x L tensor kept)."""
    scale = 1.0 / math.sqrt(q.shape[-1])

    def probabilities(start: int, end: int, k_end: int, aligned: bool) -> torch.Tensor:
        qb, qp, kp = q[:, :, start:end], q_pos[..., start:end], k_pos[..., :k_end]
        scores = (qb @ k[:, :, :k_end].transpose(-2, -1) * scale).masked_fill(
            ~causal_mask(qp, kp), float("-inf")
        )
        return (scores + pe.score_bias(qb, scores)).softmax(dim=-1)

    return chunked_softmax(q, k, v, q_pos, k_pos, probabilities, need_weights)


def chunked_softmax(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    probabilities: Callable[[int, int, int, bool], torch.Tensor],
    need_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """An explicit-softmax attention one chunk of queries at a time: ``probabilities(start,
    end, k_end, aligned)`` gives the chunk's weights over keys ``:k_end`` (its own end when
    query and key positions both run 0..T-1, "aligned", else every key); also the full weights
    when asked (attention maps)."""
    aligned = q_pos.dim() == 1 and k_pos.dim() == 1 and q.shape[2] == k.shape[2]
    outputs, weights = [], []
    for start in range(0, q.shape[2], QUERY_CHUNK):
        end = min(start + QUERY_CHUNK, q.shape[2])
        k_end = end if aligned else k.shape[2]
        chunk = probabilities(start, end, k_end, aligned)
        outputs.append(chunk @ v[:, :, :k_end])
        if need_weights:
            weights.append(F.pad(chunk, (0, k.shape[2] - k_end)))
    y = torch.cat(outputs, dim=2)
    return y, torch.cat(weights, dim=2) if need_weights else None
