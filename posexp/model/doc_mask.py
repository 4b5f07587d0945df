"""Document masking: a query attends only to earlier keys of its own document.

A training row cut from a token stream holds the end of one document and the start of the
next; with ``documents(ids)`` active (``ids``: (B, T) document index of each token, equal within
a document), attention is block-diagonal causal instead of causal, so each document is modelled
as if it stood alone (with positions restarting at each document, which the caller passes).
``block_causal`` is the one mask; it serves SDPA's ``attn_mask``, the matmul kernel's additive
term, and FlexAttention's ``mask_mod`` (``flex_mask_mod``) where FlexAttention runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import torch.nn.functional as F

_DOCUMENTS: ContextVar[torch.Tensor | None] = ContextVar("posexp_documents", default=None)


@contextmanager
def documents(ids: torch.Tensor | None) -> Iterator[None]:
    """Within the block, attention is masked to the documents ``ids`` (B, T) marks (None: off)."""
    token = _DOCUMENTS.set(ids)
    try:
        yield
    finally:
        _DOCUMENTS.reset(token)


def current() -> torch.Tensor | None:
    """The document ids in force, or None."""
    return _DOCUMENTS.get()


def block_causal(ids: torch.Tensor, tq: int | None = None) -> torch.Tensor:
    """(B, 1, Tq, T) bool: True where query i may see key j, i.e. j <= i in the same document;
    the queries are the last ``tq`` tokens (all when None)."""
    T = ids.shape[-1]
    tq = T if tq is None else tq
    qi = torch.arange(T - tq, T, device=ids.device)
    kj = torch.arange(T, device=ids.device)
    same = ids[:, T - tq :, None] == ids[:, None, :]
    return (same & (kj[None, :] <= qi[:, None]))[:, None]


def flex_mask_mod(ids: torch.Tensor) -> Callable[..., torch.Tensor]:
    """FlexAttention's ``mask_mod`` for ``block_causal(ids)``."""

    def mask_mod(
        b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> torch.Tensor:
        return (ids[b, q] == ids[b, k]) & (k <= q)

    return mask_mod


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ids: torch.Tensor,
    bias: torch.Tensor | None,
    dropout: float = 0.0,
    matmul: Callable[..., torch.Tensor] | None = None,
) -> torch.Tensor:
    """Attention of ``q``, ``k``, ``v`` (B, H, T, d) masked to the documents ``ids`` (B, T), with
    an encoding's additive ``bias`` ((H|B, H), T, T) if any: by ``matmul`` (the matmul kernel's
    ``causal_attention``) when given, else SDPA; FlexAttention on a GPU without a bias."""
    allowed = block_causal(ids, q.shape[2])
    if bias is None and q.is_cuda:
        y = _flex(q, k, v, ids)
        if y is not None:
            return y
    added = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device)
    added = added.masked_fill(~allowed, float("-inf"))
    if bias is not None:
        added = added + bias.to(q.dtype)
    if matmul is not None:
        return matmul(q, k, v, dropout, added)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=added, dropout_p=dropout)


def _flex(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor | None:
    """FlexAttention with the document mask as a block mask; None where it cannot run."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        B, _, T, _ = q.shape
        block = create_block_mask(flex_mask_mod(ids), B, None, T, T, device=q.device)
        return flex_attention(q, k, v, block_mask=block)
    except Exception:  # noqa: BLE001  no FlexAttention here (old torch, no compiler): SDPA does it
        return None
