"""Decoding with a KV cache: greedy / temperature / top-k sampling, and batched beam search.

Prompts of different lengths share a batch without padding or masks: the batch is prefilled up
to its shortest prompt, and a row still reading its prompt is fed its next prompt token instead
of a generated one (unscored). Every row thus sits at the same position at every step, each
row's sequence is exactly its prompt and then its continuation, so positions, caches and every
encoding behave as for the row alone. A batch of sorted lengths takes about (longest - shortest
prompt) + (longest continuation) steps, against one pass per distinct length when batches must
hold equal lengths: on a GPU shared by many jobs each step is a round trip, so steps are what count.

Beam search follows Wu et al. 2016 (GNMT) as used by Vaswani et al. 2017 (beam 4, alpha 0.6):
a hypothesis Y is scored ``sum log p(y_t) / lp(|Y|)`` with ``lp(n) = ((5 + n) / 6) ** alpha``,
where |Y| counts the generated tokens, eos included. Each step ranks the 2K best extensions of
the K open beams by their summed log-probability. An extension ending in eos and ranked among
the top K is a finished hypothesis; the K best others are the next open beams (the KV cache is
reordered to follow them). A row stops when it has K finished hypotheses, or when no open beam
can still beat its best finished one (whatever length it reaches up to its limit). At
the length limit the open beams compete as they are. Rows that stop leave the batch, so a long
straggler does not cost the whole batch. With K = 1 this is greedy decoding, token for token.
The best hypotheses are kept on the device, so a step syncs with the host once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

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


def length_penalties(n: torch.Tensor, alpha: float) -> torch.Tensor:
    """``length_penalty`` of each hypothesis length in ``n``, as float32."""
    return ((5.0 + n.float()) / 6.0) ** alpha


class Ragged(NamedTuple):
    """How a batch of prompts of different lengths decodes: prefilled to ``start`` tokens, row r
    then reads ``forced[r]`` more prompt tokens and generates up to ``limits[r]``."""

    start: int
    forced: list[int]
    limits: list[int]

    @property
    def ends(self) -> list[int]:
        """The step of each row's last possible token."""
        return [f + m for f, m in zip(self.forced, self.limits, strict=True)]


def ragged(
    prompts: torch.Tensor, max_new_tokens: int | Sequence[int], lengths: Sequence[int] | None
) -> Ragged:
    """The layout of ``prompts`` (B, P), row r's prompt its first ``lengths[r]`` tokens (default:
    all of it), each with its limit of new tokens; checked."""
    B, P = prompts.shape
    limits = (
        [int(max_new_tokens)] * B
        if isinstance(max_new_tokens, int)
        else [int(m) for m in max_new_tokens]
    )
    sizes = [P] * B if lengths is None else [int(n) for n in lengths]
    if len(limits) != B or len(sizes) != B:
        raise ValueError(f"{len(limits)} limits and {len(sizes)} lengths for {B} prompts")
    for m in limits:
        if m < 1:
            raise PosexpError(f"max_new_tokens must be a positive integer, got {m}")
    for n in sizes:
        if not 1 <= n <= P:
            raise ValueError(f"prompt length {n} outside 1..{P}")
    start = min(sizes)
    return Ragged(start, [n - start for n in sizes], limits)


@torch.no_grad()
def sample_decode(
    step: StepFn,
    cache: Any,
    prompts: torch.Tensor,
    max_new_tokens: int | Sequence[int],
    temperature: float = 0.0,
    top_k: int | None = None,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    lengths: Sequence[int] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Greedy or sampled continuations (B, n) of each row's prompt (its first ``lengths[r]``
    tokens), eos after a row's end (0 past its limit when there is no eos)."""
    B, P = prompts.shape
    start, forced, limits = layout = ragged(prompts, max_new_tokens, lengths)
    ends = layout.ends
    pad = eos_id if eos_id is not None else 0
    forced_t = torch.tensor(forced, device=prompts.device)
    end_t = torch.tensor(ends, device=prompts.device)
    logits = step(prompts[:, :start], cache)
    finished = torch.zeros(B, dtype=torch.bool, device=prompts.device)
    fed = []
    for s in range(1, max(ends) + 1):
        token = sample(logits, temperature, top_k, generator)
        reading = forced_t >= s
        if s <= max(forced):
            token = torch.where(reading, prompts[:, min(start + s - 1, P - 1)], token)
        token = token.masked_fill(finished, pad)
        if eos_id is not None:
            finished |= (token == eos_id) & ~reading
        finished |= end_t <= s
        fed.append(token)
        if on_step is not None:
            on_step(sum(1 for f, e in zip(forced, ends, strict=True) if f < s <= e))
        if s == max(ends) or bool(finished.all()):
            break
        logits = step(token[:, None], cache)
    seq = torch.stack(fed, dim=1).cpu()
    rows = [seq[r, f : f + m] for r, (f, m) in enumerate(zip(forced, limits, strict=True))]
    out = torch.full((B, max(len(r) for r in rows)), pad, dtype=prompts.dtype)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out.to(prompts.device)


def keep_better(
    best: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    rows: torch.Tensor,
    score: torch.Tensor,
    seqs: torch.Tensor,
    at: torch.Tensor,
) -> None:
    """Where ``score`` (n,) beats a row's best, make slot ``at`` of ``seqs`` (n, K, s) its best
    hypothesis: in place, on the device, with no sync."""
    best_score, best_seq, best_end = best
    better = score > best_score[rows]
    s = seqs.shape[2]
    chosen = seqs[torch.arange(rows.numel(), device=rows.device), at]  # (n, s)
    best_score[rows] = torch.where(better, score, best_score[rows])
    best_seq[rows, :s] = torch.where(better[:, None], chosen, best_seq[rows, :s])
    best_end[rows] = torch.where(better, s, best_end[rows])


@torch.no_grad()
def beam_search(
    step: StepFn,
    cache: Any,
    prompts: torch.Tensor,
    max_new_tokens: int | Sequence[int],
    beam_size: int = 4,
    alpha: float = 0.6,
    eos_id: int | None = None,
    lengths: Sequence[int] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best hypothesis (B, n), eos-padded, and its score (B,) for each row's prompt (its first
    ``lengths[r]`` tokens); see the module doc. ``on_step(n)``: a step of n rows generating."""
    if beam_size < 1:
        raise PosexpError(f"beam size must be a positive integer, got {beam_size}")
    start, forced, limits = layout = ragged(prompts, max_new_tokens, lengths)
    (B, P), K, device = prompts.shape, beam_size, prompts.device
    width = max(layout.ends)
    logp = step(prompts[:, :start], cache).float().log_softmax(-1)  # (B, V)
    V = logp.shape[-1]
    expand = torch.arange(B, device=device).repeat_interleave(K)
    reorder_cache(cache, expand)
    logp = logp.index_select(0, expand)
    # Only beam 0 of each row is live at the start, so the K beams do not start as K copies.
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0
    tokens = prompts.new_empty(B * K, 0)  # per slot, every token fed since the prefill
    forced_t, limit_t = (torch.tensor(x, device=device) for x in (forced, limits))
    beams = torch.arange(K, device=device)
    rows = torch.arange(B, device=device)  # original row of each row still searching
    alive = list(range(B))  # the same, known to the host without a sync
    pad = eos_id if eos_id is not None else 0
    best = (
        torch.full((B,), float("-inf"), device=device),
        prompts.new_full((B, width), pad),
        torch.zeros(B, dtype=torch.long, device=device),
    )
    for s in range(1, width + 1):
        n = rows.numel()
        t = s - forced_t[rows]  # hypothesis length after this step; <= 0: the row reads its prompt
        reading = t <= 0
        cand = (scores.reshape(n * K, 1) + logp).reshape(n, K * V)
        top, flat = cand.topk(K, dim=1)  # sorted, best first
        origin, token = flat // V, flat % V
        if s <= max(forced):
            # A row still reading its prompt takes its next prompt token on every beam, unscored.
            read = reading[:, None]
            top = torch.where(read, scores, top)
            origin = torch.where(read, beams, origin)
            token = torch.where(read, prompts[rows, min(start + s - 1, P - 1)][:, None], token)
        src = torch.arange(n, device=device)[:, None] * K + origin  # the slot each one extends
        tokens = torch.cat((tokens.index_select(0, src.flatten()), token.reshape(-1, 1)), dim=1)
        seqs = tokens.view(n, K, s)
        lp = length_penalties(t.clamp(min=1), alpha)[:, None]
        if eos_id is not None:
            # An extension ending in eos is a finished hypothesis; its slot leaves the beam.
            is_eos = (token == eos_id) & torch.isfinite(top) & ~reading[:, None]
            row_best, at = torch.where(is_eos, top / lp, float("-inf")).max(1)
            keep_better(best, rows, row_best, seqs, at)
            top = top.masked_fill(is_eos, float("-inf"))
        scores = top
        # Length limit: the open beams compete as they are.
        at_limit = t >= limit_t[rows]
        open_score, at = torch.where(at_limit[:, None], scores / lp, float("-inf")).max(1)
        keep_better(best, rows, open_score, seqs, at)
        # The best an open beam can still reach: its log-prob sum can only fall, so divide by
        # the largest penalty among the lengths it could stop at (t + 1 .. its limit). A row
        # still reading has no finished hypothesis (-inf), so it never stops here.
        bound = scores.max(1).values / torch.maximum(
            length_penalties(t + 1, alpha), length_penalties(limit_t[rows], alpha)
        )
        done = at_limit | (best[0][rows] >= bound)  # also once every slot has finished
        if on_step is not None:
            on_step(sum(1 for r in alive if forced[r] < s))
        left = (~done).nonzero().flatten()  # the step's one sync with the device
        if left.numel() == 0:
            break
        if left.numel() < n:
            alive = [alive[i] for i in left.tolist()]
            rows, scores, src = rows[left], scores[left], src[left]
            tokens = seqs[left].reshape(-1, s)
        reorder_cache(cache, src.flatten())
        logp = step(tokens[:, -1:], cache).float().log_softmax(-1)
    # Each row's hypothesis, without the prompt tokens it read after the prefill.
    seq, end = best[1].cpu(), best[2].tolist()
    hyps = [seq[r, forced[r] : max(end[r], forced[r])] for r in range(B)]
    out = torch.full((B, max(h.numel() for h in hyps)), pad, dtype=prompts.dtype)
    for r, hyp in enumerate(hyps):
        out[r, : hyp.numel()] = hyp
    return out.to(device), best[0]
