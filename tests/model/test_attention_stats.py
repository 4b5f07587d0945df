"""Attention statistics on models whose attention is known in closed form: uniform over the last
k keys, all on the diagonal, all on the first token, uniform with a sink logit."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.model import GPT, ModelConfig
from posexp.model.attention_stats import (
    AttentionStats,
    attention_statistics,
    bucket_label,
    bucket_of,
    mean_inverse_keys,
    mean_log_keys,
    n_buckets,
)
from posexp.pe.base import PE_REGISTRY

T, K = 16, 4  # window length, keys a query sees when attention is uniform over the last K


def by(rows, **where):
    return [r for r in rows if all(r[k] == v for k, v in where.items())]


def test_buckets_are_log2_ranges():
    assert bucket_of(torch.tensor([0, 1, 2, 3, 4, 7, 8, 15, 16, 1023, 1024])).tolist() == [
        0,
        1,
        2,
        2,
        3,
        3,
        4,
        4,
        5,
        10,
        11,
    ]
    assert n_buckets(1) == 1 and n_buckets(2) == 2 and n_buckets(16) == 5 and n_buckets(17) == 6
    assert [bucket_label(b) for b in range(4)] == ["0", "1", "2–3", "4–7"]
    assert bucket_label(4, length=12) == "8–11"


def test_the_uniform_references_are_means_over_the_bucket():
    assert mean_log_keys(0, 0) == 0.0
    assert mean_log_keys(4, 7) == pytest.approx((math.log(5 * 6 * 7 * 8)) / 4)
    assert mean_inverse_keys(0, 0) == 1.0
    assert mean_inverse_keys(2, 3) == pytest.approx((1 / 3 + 1 / 4) / 2)


def uniform_last_k(B: int = 2, H: int = 3) -> torch.Tensor:
    """Weights (B, H, T, T): query i spread evenly over keys max(0, i-K+1)..i."""
    w = torch.zeros(B, H, T, T)
    for i in range(T):
        lo = max(0, i - K + 1)
        w[:, :, i, lo : i + 1] = 1.0 / (i + 1 - lo)
    return w


# Uniform over the last 4 keys, queries 0..15: query 0 all at distance 0; query 1 half at 0 and
# 1; query 2 a third at 0, 1, 2; queries 3..15 a quarter at 0 and 1, a half in 2–3.
UNIFORM_MASS = [
    (1 + 1 / 2 + 1 / 3 + 13 / 4) / 16,
    (1 / 2 + 1 / 3 + 13 / 4) / 16,
    (1 / 3 + 13 / 2) / 16,
    0.0,
    0.0,
]
# Queries able to reach each distance bucket (i >= its low end): 16, 15, 14, 12, 8 per window.
UNIFORM_REACHABLE = [
    (1 + 1 / 2 + 1 / 3 + 13 / 4) / 16,
    (1 / 2 + 1 / 3 + 13 / 4) / 15,
    (1 / 3 + 13 / 2) / 14,
    0.0,
    0.0,
]
# Entropy by query bucket: log 1 | log 2 | (log 3 + log 4)/2 | log 4 | log 4
UNIFORM_ENTROPY = [0.0, math.log(2), (math.log(3) + math.log(4)) / 2, math.log(4), math.log(4)]
# Weight on key 0: query 0 all, query 1 a half, 2 a third, 3 a quarter, later ones none.
UNIFORM_SINK = [1.0, 1 / 2, (1 / 3 + 1 / 4) / 2, 0.0, 0.0]


def check_uniform(stats: AttentionStats, heads: int) -> None:
    rows = stats.rows()
    for h in range(heads):
        dist = by(rows["distance"], layer=0, head=h)
        assert [r["mass"] for r in dist] == pytest.approx(UNIFORM_MASS, abs=1e-6)
        assert [r["mass_reachable"] for r in dist] == pytest.approx(UNIFORM_REACHABLE, abs=1e-6)
        assert [r["queries"] for r in dist] == [2 * q for q in (16, 15, 14, 12, 8)]
        ent = by(rows["entropy"], layer=0, head=h)
        assert [r["entropy"] for r in ent] == pytest.approx(UNIFORM_ENTROPY, abs=1e-5)
        assert [r["queries"] for r in ent] == [2 * q for q in (1, 1, 2, 4, 8)]
        sink = by(rows["sink"], layer=0, head=h)
        assert [r["sink_share"] for r in sink] == pytest.approx(UNIFORM_SINK, abs=1e-6)
        (summary,) = by(rows["summary"], layer=0, head=h)
        assert summary["far_mass"] == pytest.approx(0.0, abs=1e-7)  # nothing 8 or more back
        assert summary["late_sink_share"] == pytest.approx(0.0, abs=1e-7)


def test_statistics_of_hand_written_weights_match_the_closed_form():
    stats = AttentionStats(T, far=8)
    stats.add(0, uniform_last_k())
    check_uniform(stats, heads=3)
    assert stats.windows == 2


def test_statistics_accumulate_over_batches_and_query_blocks(monkeypatch):
    # Blocks of 5 queries and two batches of one window give the same numbers as one pass.
    from posexp.model import attention_stats

    monkeypatch.setattr(attention_stats, "QUERY_BLOCK", 5)
    stats = AttentionStats(T, far=8)
    w = uniform_last_k()
    stats.add(0, w[:1])
    stats.add(0, w[1:])
    check_uniform(stats, heads=3)


def tiny(pe: str, **kw) -> GPT:
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, pe=pe, train_length=8, **kw)
    return GPT(cfg)


def zero_queries_and_keys(model: GPT) -> None:
    """Every score q·k becomes 0: attention is uniform over whatever keys a query may see."""
    with torch.no_grad():
        for block in model.blocks:
            d = model.cfg.d_model
            block.attn.qkv.weight[: 2 * d].zero_()
            if block.attn.qkv.bias is not None:
                block.attn.qkv.bias[: 2 * d].zero_()


def windows(B: int = 2) -> list[torch.Tensor]:
    return [torch.randint(0, 32, (B, T))]


def test_a_model_with_a_window_of_k_and_no_scores_attends_uniformly_to_its_last_k_keys():
    model = tiny("none", window=K)
    zero_queries_and_keys(model)
    check_uniform(attention_statistics(model, windows(), T, far=8), heads=2)


def test_alibi_with_a_huge_slope_attends_only_to_the_diagonal():
    model = tiny("alibi")
    model.pe.slopes.fill_(1e4)
    rows = attention_statistics(model, windows(), T, far=8).rows()
    for r in rows["distance"]:
        assert r["mass"] == pytest.approx(1.0 if r["bucket"] == 0 else 0.0, abs=1e-6)
    assert all(r["entropy"] == pytest.approx(0.0, abs=1e-6) for r in rows["entropy"])
    for r in rows["sink"]:  # only query 0 attends to key 0: its own
        assert r["sink_share"] == pytest.approx(1.0 if r["bucket"] == 0 else 0.0, abs=1e-6)
    assert all(r["far_mass"] == pytest.approx(0.0, abs=1e-6) for r in rows["summary"])


def test_alibi_with_a_huge_negative_slope_attends_only_to_the_first_token():
    model = tiny("alibi")
    model.pe.slopes.fill_(-1e4)  # the bias grows with distance: the farthest key, 0, wins
    rows = attention_statistics(model, windows(), T, far=8).rows()
    assert all(r["sink_share"] == pytest.approx(1.0, abs=1e-6) for r in rows["sink"])
    assert all(r["entropy"] == pytest.approx(0.0, abs=1e-6) for r in rows["entropy"])
    # Query i puts everything at distance i: bucket b holds the share of queries in it.
    in_bucket = [1, 1, 2, 4, 8]
    reach = [16, 15, 14, 12, 8]
    for r in rows["distance"]:
        assert r["mass"] == pytest.approx(in_bucket[r["bucket"]] / 16, abs=1e-6)
        assert r["mass_reachable"] == pytest.approx(
            in_bucket[r["bucket"]] / reach[r["bucket"]], abs=1e-6
        )
    for r in rows["summary"]:
        assert r["far_mass"] == pytest.approx(1.0, abs=1e-6)
        assert r["late_sink_share"] == pytest.approx(1.0, abs=1e-6)


def test_a_sink_logit_of_zero_is_one_more_outcome_in_the_entropy():
    # Scores 0 and a sink logit 0: query i spreads 1/(i+2) over its i+1 keys and the sink, so
    # its entropy is log(i+2) and its weight on key 0 is 1/(i+2).
    model = tiny("none", sink_logit=True)
    zero_queries_and_keys(model)
    rows = attention_statistics(model, windows(), T, far=8).rows()
    for r in by(rows["entropy"], layer=1):
        lo, hi = r["low"], r["high"]
        expected = sum(math.log(i + 2) for i in range(lo, hi + 1)) / (hi - lo + 1)
        assert r["entropy"] == pytest.approx(expected, abs=1e-5)
    for r in by(rows["sink"], layer=0):
        lo, hi = r["low"], r["high"]
        expected = sum(1 / (i + 2) for i in range(lo, hi + 1)) / (hi - lo + 1)
        assert r["sink_share"] == pytest.approx(expected, abs=1e-6)
    # The buckets hold what the keys took: sum_i (i+1)/(i+2) / T, not 1.
    total = sum(r["mass"] for r in by(rows["distance"], layer=0, head=0))
    assert total == pytest.approx(sum((i + 1) / (i + 2) for i in range(T)) / T, abs=1e-6)


@pytest.mark.parametrize("pe", sorted(n for n in PE_REGISTRY.names() if n != "learned"))
def test_every_encoding_gives_its_probabilities_layer_by_layer(pe):
    seen = []
    model = tiny(pe)
    out = model(windows()[0], on_attention=lambda i, w: seen.append((i, w.shape, w.sum(-1))))
    assert "attention" not in out  # handed over, not kept
    assert [(i, tuple(s)) for i, s, _ in seen] == [(0, (2, 2, T, T)), (1, (2, 2, T, T))]
    for _, _, rows in seen:  # every row a distribution over the keys (no sink logit here)
        assert torch.allclose(rows, torch.ones_like(rows), atol=1e-5)


def test_the_model_is_put_back_in_the_mode_it_was_in():
    model = tiny("rope").train()
    attention_statistics(model, windows(), T, far=8)
    assert model.training


def test_a_layer_that_gives_no_probabilities_is_one_line(monkeypatch):
    from posexp.errors import PosexpError
    from posexp.model import gpt

    model = tiny("rope")
    real = gpt.attend
    monkeypatch.setattr(gpt, "attend", lambda call: (real(call)[0], None))
    with pytest.raises(PosexpError, match="pe=rope in layer 0 gives no attention probabilities"):
        model(windows()[0], on_attention=lambda i, w: None)


def test_a_window_with_a_sink_token_spreads_over_the_window_and_token_0():
    # Scores 0, the last K keys and position 0: a query i >= K sees K + 1 keys evenly.
    model = tiny("none", window=K, sinks=1)
    zero_queries_and_keys(model)
    rows = attention_statistics(model, windows(), T, far=8).rows()
    late = [r for r in rows["sink"] if r["low"] >= K]
    assert late and all(r["sink_share"] == pytest.approx(1 / (K + 1), abs=1e-6) for r in late)
    late = [r for r in rows["entropy"] if r["low"] >= K]
    assert all(r["entropy"] == pytest.approx(math.log(K + 1), abs=1e-5) for r in late)
    for r in rows["summary"]:  # queries 8..15 put only token 0's share at distance >= 8
        assert r["far_mass"] == pytest.approx(1 / (K + 1), abs=1e-6)


def test_stick_breaking_with_no_scores_halves_its_weight_at_each_step_back():
    # z = 0: each key takes half of what nearer keys left, A_ij = 2^-(i-j) for j < i, and the
    # query's own value the leftover 2^-i. Query i's entropy is log 2 · (2 - 2^(1-i)).
    model = tiny("stick_breaking")
    zero_queries_and_keys(model)
    rows = attention_statistics(model, windows(), T, far=8).rows()
    for r in by(rows["entropy"], layer=0):
        lo, hi = r["low"], r["high"]
        expected = sum(math.log(2) * (2 - 2 ** (1 - i)) for i in range(lo, hi + 1)) / (hi - lo + 1)
        assert r["entropy"] == pytest.approx(expected, abs=1e-5)
    for r in by(rows["sink"], layer=1):
        lo, hi = r["low"], r["high"]
        expected = sum(2.0**-i for i in range(lo, hi + 1)) / (hi - lo + 1)  # query 0: itself
        assert r["sink_share"] == pytest.approx(expected, abs=1e-6)
    dist = by(rows["distance"], layer=0, head=0)
    # Summed over queries i: distance d >= 1 takes 2^-d from each of the T - d queries that
    # reach it; distance 0 the leftovers 2^-i.
    sums = [sum(2.0**-i for i in range(T))] + [0.0] * 4
    for d in range(1, T):
        sums[int(bucket_of(torch.tensor([d]))[0])] += (T - d) * 2.0**-d
    assert [r["mass"] for r in dist] == pytest.approx([v / T for v in sums], abs=1e-6)
