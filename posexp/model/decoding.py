"""Decoding with a KV cache: greedy / temperature / top-k sampling, and batched beam search.

Beam search follows Wu et al. 2016 (GNMT) as used by Vaswani et al. 2017 (beam 4, alpha 0.6):
a hypothesis Y is scored ``sum log p(y_t) / lp(|Y|)`` with ``lp(n) = ((5 + n) / 6) ** alpha``,
where |Y| counts the generated tokens, eos included. Each step ranks the 2K best extensions of
the K open beams by their summed log-probability. An extension ending in eos and ranked among
the top K is a finished hypothesis; the K best others are the next open beams (the KV cache is
reordered to follow them). A row stops when it has K finished hypotheses, or when no open beam
can still beat its best finished one (whatever length it reaches up to ``max_new_tokens``). At
the length limit the open beams compete as they are. Rows that stop leave the batch, so a long
straggler does not cost the whole batch. With K = 1 this is greedy decoding, token for token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from posexp.errors import PosexpError

# (tokens (N, T), cache) -> next-token logits (N, V) of the last position; extends the cache.
# The cache is anything with ``layers``: a list of dicts of row-major tensors (posexp.model.KVCache).
StepFn = Callable[[torch.Tensor, Any], torch.Tensor]


def sample(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Greedy (temperature 0) or temperature / top-k sampling of next tokens from (B, V) logits."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)


def length_penalty(n: int, alpha: float) -> float:
    """GNMT's length normalisation ``((5 + n) / 6) ** alpha`` (1 for alpha = 0)."""
    return ((5.0 + n) / 6.0) ** alpha


def reorder_cache(cache: Any, index: torch.Tensor) -> None:
    """Keep rows ``index`` (in that order, repeats allowed) of every cached per-row tensor
    (keys, values, what an encoding with attention of its own carries: batch first) and of what
    the positional encoding carries per row. Positions shared by the batch are 1-D: kept."""
    for layer in cache.layers:
        for key, value in layer.items():
            if isinstance(value, torch.Tensor) and value.dim() >= 2:
                layer[key] = value.index_select(0, index)
    for key, value in cache.memo.items():
        cache.memo[key] = value.index_select(0, index)


@torch.no_grad()
def beam_search(
    step: StepFn,
    cache: Any,
    prompts: torch.Tensor,
    max_new_tokens: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    eos_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best hypothesis per prompt row (B, n), eos-padded, and its score (B,); see module doc."""
    if beam_size < 1:
        raise PosexpError(f"beam size must be a positive integer, got {beam_size}")
    if max_new_tokens < 1:
        raise PosexpError(f"max_new_tokens must be a positive integer, got {max_new_tokens}")
    B, K, device = prompts.shape[0], beam_size, prompts.device
    logp = step(prompts, cache).float().log_softmax(-1)  # (B, V)
    V = logp.shape[-1]
    expand = torch.arange(B, device=device).repeat_interleave(K)
    reorder_cache(cache, expand)
    logp = logp.index_select(0, expand)
    # Only beam 0 of each row is live at the start, so the K beams do not start as K copies.
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0
    tokens = prompts.new_empty(B * K, 0)
    rows = torch.arange(B, device=device)  # original row of each row still searching
    best_score = torch.full((B,), float("-inf"), device=device)
    best_tokens: list[torch.Tensor | None] = [None] * B
    for t in range(1, max_new_tokens + 1):
        n = rows.numel()
        cand = (scores.reshape(n * K, 1) + logp).reshape(n, K * V)
        top, flat = cand.topk(K, dim=1)  # sorted, best first
        origin, token = flat // V, flat % V
        lp = length_penalty(t, alpha)
        if eos_id is not None:
            # An extension ending in eos is a finished hypothesis; its slot leaves the beam.
            is_eos = (token == eos_id) & torch.isfinite(top)
            row_best, at = torch.where(is_eos, top / lp, float("-inf")).max(1)
            for r in (row_best > best_score[rows]).nonzero().flatten().tolist():
                best_score[rows[r]] = row_best[r]
                best_tokens[int(rows[r])] = torch.cat(
                    (tokens[r * K + int(origin[r, at[r]])], token[r, at[r]].view(1))
                )
            top = top.masked_fill(is_eos, float("-inf"))
        src = torch.arange(n, device=device)[:, None] * K + origin  # the beam each one extends
        tokens = torch.cat((tokens.index_select(0, src.flatten()), token.reshape(-1, 1)), dim=1)
        scores = top
        if t == max_new_tokens:
            # Length limit: the open beams compete as they are.
            open_score, at = (scores / lp).max(1)
            for r in (open_score > best_score[rows]).nonzero().flatten().tolist():
                best_score[rows[r]] = open_score[r]
                best_tokens[int(rows[r])] = tokens[r * K + int(at[r])]
            break
        # The best an open beam can still reach: its log-prob sum can only fall, so divide by
        # the largest penalty among the lengths it could stop at (t + 1 .. max_new_tokens).
        bound = scores.max(1).values / max(
            length_penalty(t + 1, alpha), length_penalty(max_new_tokens, alpha)
        )
        done = best_score[rows] >= bound  # also true once every slot of the row has finished
        if bool(done.all()):
            break
        if bool(done.any()):
            alive = (~done).nonzero().flatten()
            rows, scores, src = rows[alive], scores[alive], src[alive]
            tokens = tokens.view(n, K, t)[alive].reshape(-1, t)
        reorder_cache(cache, src.flatten())
        logp = step(tokens[:, -1:], cache).float().log_softmax(-1)
    width = max(int(tok.numel()) for tok in best_tokens if tok is not None)
    pad = eos_id if eos_id is not None else 0
    out = prompts.new_full((B, width), pad)
    for r, tok in enumerate(best_tokens):
        if tok is not None:
            out[r, : tok.numel()] = tok
    return out, best_score
