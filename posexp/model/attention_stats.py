"""Where a model's attention goes: statistics of the probabilities each layer actually uses,
accumulated one layer and one block of queries at a time over windows of real text.

Three statistics, per layer and head, over windows whose positions run 0..T-1:

* **mass by distance**: the weight a query puts on keys at distance d = i - j, summed within
  log-distance buckets 0, 1, 2–3, 4–7, … (bucket b >= 1 holds 2^(b-1) <= d < 2^b). Two
  normalisations: ``mass`` averages over every query of the windows (the buckets of one row add
  up to the row's total weight, 1 but for what a sink logit or a dropped leftover absorbs);
  ``mass_reachable`` averages over the queries that can reach the bucket at all (position
  i >= the bucket's smallest distance), so a far bucket is not diluted by the early queries
  that have no key that far back;
* **entropy** of each query's distribution over keys (nats), averaged within log-spaced
  buckets of query position (the same edges as distance); the weight no key received (a sink
  logit, stick-breaking's dropped leftover) counts as one more outcome, so a row that sums to
  less than 1 still has a proper entropy; a uniform row over n keys has log n;
* **sink share**: the weight on the window's first token (key position 0), averaged within
  the same query-position buckets.

And two numbers per layer and head for comparisons: the share of attention at distances of at
least ``far`` (the training length L0), over the queries at positions >= ``far`` (None when the
window is not longer than ``far``), and the sink share over the queries of the window's second
half.

The probabilities come from ``GPT.forward(on_attention=...)``, the explicit path of every
layer (the encoding's bias, window, sinks and sink logit, or its own attention as it computes
it), never re-derived here. A layer's (B, H, T, T) is reduced block by block of queries and
dropped before the next layer runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

# Queries reduced at once: a (B, H, QUERY_BLOCK, T) slice and its bucket sums at most.
QUERY_BLOCK = 256


def bucket_of(values: torch.Tensor) -> torch.Tensor:
    """Log2 bucket of non-negative integers: 0 -> 0, 1 -> 1, 2–3 -> 2, 4–7 -> 3, …"""
    v = values.clamp(min=0)
    # frexp's exponent of v is floor(log2 v) + 1 for v >= 1 and 0 for v = 0: exactly the bucket.
    return torch.frexp(v.to(torch.float64))[1].to(torch.long)


def n_buckets(length: int) -> int:
    """How many buckets the values 0..length-1 fall into."""
    return int(bucket_of(torch.tensor([max(0, length - 1)]))[0]) + 1


def bucket_range(b: int) -> tuple[int, int]:
    """The smallest and largest value of bucket ``b`` (0: 0–0, 1: 1–1, 2: 2–3, 3: 4–7)."""
    return (0, 0) if b == 0 else (2 ** (b - 1), 2**b - 1)


def bucket_label(b: int, length: int | None = None) -> str:
    """``0``, ``1``, ``2–3``, ``4–7``…; the last bucket's top cut at ``length`` - 1 where given."""
    lo, hi = bucket_range(b)
    if length is not None:
        hi = min(hi, length - 1)
    return str(lo) if lo == hi else f"{lo}–{hi}"


@dataclass
class LayerSums:
    """One layer's running sums over every query seen, per head (float64)."""

    mass: torch.Tensor  # (H, distance buckets): weight summed over queries
    entropy: torch.Tensor  # (H, position buckets): entropy summed over the bucket's queries
    sink: torch.Tensor  # (H, position buckets): weight on key 0 summed likewise
    far: torch.Tensor  # (H,): weight at distance >= far, summed over queries at >= far
    late_sink: torch.Tensor  # (H,): weight on key 0 summed over the second half's queries


@dataclass
class AttentionStats:
    """Accumulates the statistics of windows of ``length`` tokens (positions 0..length-1)
    layer by layer: ``add(layer, weights)`` takes one layer's (B, H, length, length)
    probabilities; ``far``: the distance the far mass counts from (the training length)."""

    length: int
    far: int
    layers: dict[int, LayerSums] = field(default_factory=dict)
    windows: int = 0  # rows seen (B summed over batches), counted on layer 0

    def add(self, layer: int, weights: torch.Tensor) -> None:
        """Fold one layer's probabilities (B, H, T, T) of windows from position 0 into the sums."""
        B, H, Tq, Tk = weights.shape
        if Tq != self.length or Tk != self.length:
            raise ValueError(f"weights of {Tq}x{Tk}, expected {self.length}x{self.length}")
        nb = n_buckets(self.length)
        sums = self.layers.get(layer)
        if sums is None:
            zeros = torch.zeros
            sums = LayerSums(
                zeros(H, nb, dtype=torch.float64),
                zeros(H, nb, dtype=torch.float64),
                zeros(H, nb, dtype=torch.float64),
                zeros(H, dtype=torch.float64),
                zeros(H, dtype=torch.float64),
            )
            self.layers[layer] = sums
        if layer == 0:
            self.windows += B
        device = weights.device
        keys = torch.arange(Tk, device=device)
        for start in range(0, Tq, QUERY_BLOCK):
            end = min(start + QUERY_BLOCK, Tq)
            w = weights[:, :, start:end].to(torch.float64)  # (B, H, n, T)
            queries = torch.arange(start, end, device=device)
            distance = queries[:, None] - keys[None, :]  # (n, T); negative: a future key
            bucket = bucket_of(distance).expand_as(w)
            visible = (distance >= 0).to(w.dtype)
            w_seen = w * visible  # a future key's weight is 0 already; kept exact regardless
            by_distance = torch.zeros(B, H, end - start, nb, dtype=w.dtype, device=device)
            by_distance.scatter_add_(-1, bucket, w_seen)
            sums.mass += by_distance.sum(dim=(0, 2)).cpu()
            # Entropy with the weight no key took as one more outcome (xlogy: 0 log 0 = 0).
            rest = (1.0 - w_seen.sum(-1)).clamp(min=0.0)
            entropy = -(
                torch.special.xlogy(w_seen, w_seen).sum(-1) + torch.special.xlogy(rest, rest)
            )
            q_bucket = bucket_of(queries)
            pos = torch.zeros(B, H, nb, dtype=w.dtype, device=device)
            pos.index_add_(-1, q_bucket, entropy)
            sums.entropy += pos.sum(0).cpu()
            pos.zero_().index_add_(-1, q_bucket, w_seen[..., 0])
            sums.sink += pos.sum(0).cpu()
            if self.length > self.far:
                beyond = (distance >= self.far).to(w.dtype)
                sums.far += (w_seen * beyond).sum(dim=(0, 2, 3)).cpu()
            late = (queries >= self.length // 2).to(w.dtype)
            sums.late_sink += (w_seen[..., 0] * late).sum(dim=(0, 2)).cpu()

    def queries_reaching(self, b: int) -> int:
        """Queries (over every window) that have a key in distance bucket ``b``: i >= its low end."""
        lo = bucket_range(b)[0]
        return self.windows * max(0, self.length - lo)

    def queries_in(self, b: int) -> int:
        """Queries (over every window) whose position falls in bucket ``b``."""
        lo, hi = bucket_range(b)
        return self.windows * max(0, min(hi, self.length - 1) - lo + 1)

    def rows(self) -> dict[str, list[dict[str, object]]]:
        """The statistics as long-format rows, one table each: ``distance``, ``entropy``,
        ``sink`` (per layer, head and bucket) and ``summary`` (per layer and head)."""
        out: dict[str, list[dict[str, object]]] = {
            "distance": [],
            "entropy": [],
            "sink": [],
            "summary": [],
        }
        n_queries = self.windows * self.length
        late_queries = self.windows * (self.length - self.length // 2)
        far_queries = self.windows * max(0, self.length - self.far)
        for layer in sorted(self.layers):
            s = self.layers[layer]
            heads, nb = s.mass.shape
            for h in range(heads):
                for b in range(nb):
                    lo, hi = bucket_range(b)
                    hi = min(hi, self.length - 1)
                    base = {"length": self.length, "layer": layer, "head": h, "bucket": b}
                    edges = {"low": lo, "high": hi, "label": bucket_label(b, self.length)}
                    reach = self.queries_reaching(b)
                    out["distance"].append(
                        {
                            **base,
                            **edges,
                            "mass": float(s.mass[h, b]) / n_queries,
                            "mass_reachable": float(s.mass[h, b]) / reach,
                            "queries": reach,
                        }
                    )
                    count = self.queries_in(b)
                    out["entropy"].append(
                        {
                            **base,
                            **edges,
                            "entropy": float(s.entropy[h, b]) / count,
                            "uniform": mean_log_keys(lo, hi),
                            "queries": count,
                        }
                    )
                    out["sink"].append(
                        {
                            **base,
                            **edges,
                            "sink_share": float(s.sink[h, b]) / count,
                            "uniform": mean_inverse_keys(lo, hi),
                            "queries": count,
                        }
                    )
                out["summary"].append(
                    {
                        "length": self.length,
                        "layer": layer,
                        "head": h,
                        "far": self.far,
                        "far_mass": float(s.far[h]) / far_queries if far_queries else None,
                        "late_sink_share": float(s.late_sink[h]) / late_queries,
                        "windows": self.windows,
                    }
                )
        return out


def mean_log_keys(lo: int, hi: int) -> float:
    """The mean of log(i + 1) over query positions lo..hi: the entropy, in nats, of attention
    spread evenly over every key a query sees (the figures' reference line)."""
    # sum_{i=lo}^{hi} log(i + 1) = log((hi + 1)!) - log(lo!)
    return (math.lgamma(hi + 2) - math.lgamma(lo + 1)) / (hi - lo + 1)


def mean_inverse_keys(lo: int, hi: int) -> float:
    """The mean of 1/(i + 1) over query positions lo..hi: the first token's share under
    attention spread evenly over every key a query sees (the figures' reference line)."""
    return sum(1.0 / (i + 1) for i in range(lo, hi + 1)) / (hi - lo + 1)


@torch.no_grad()
def attention_statistics(
    model: torch.nn.Module, batches: Iterable[torch.Tensor], length: int, far: int
) -> AttentionStats:
    """The statistics of ``model``'s attention over ``batches`` of token windows (B, length),
    each read from position 0; ``far``: the distance the far mass counts from. The model runs
    in eval mode; its mode is put back after."""
    was_training = model.training
    model.eval()
    stats = AttentionStats(length, far)
    try:
        for x in batches:
            model(x, on_attention=stats.add)
    finally:
        model.train(was_training)
    return stats
