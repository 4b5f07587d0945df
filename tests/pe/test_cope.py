"""CoPE against a pair-by-pair construction of its logits, worked numbers, and its limits."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.model.attention import content_attention
from posexp.pe import PEContext, build_pe
from tests.helpers import run_config


def cope(npos_max: int = 8, heads: int = 2, head_dim: int = 4) -> torch.nn.Module:
    pe = build_pe("cope", PEContext(heads * head_dim, heads, head_dim, 16), npos_max=npos_max)
    with torch.no_grad():
        pe.table.copy_(torch.randn(head_dim, npos_max, generator=torch.Generator().manual_seed(1)))
    return pe


def reference(q, k, v, table, npos_max):
    """Golovneva et al.'s definition, one (i, j) pair at a time in plain Python floats."""
    B, H, T, d = q.shape
    out = torch.zeros_like(v)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                logits = []
                for j in range(i + 1):
                    dot = lambda a, c: sum(float(x) * float(y) for x, y in zip(a, c, strict=True))  # noqa: E731
                    count = sum(
                        1 / (1 + math.exp(-dot(q[b, h, i], k[b, h, t]) / math.sqrt(d)))
                        for t in range(j, i + 1)
                    )
                    p = min(count, npos_max - 1)
                    lo, hi = math.floor(p), math.ceil(p)
                    e = [(p - lo) * table[c, hi] + (1 - p + lo) * table[c, lo] for c in range(d)]
                    logits.append(dot(q[b, h, i], k[b, h, j]) / math.sqrt(d) + dot(q[b, h, i], e))
                top = max(logits)
                w = [math.exp(x - top) for x in logits]
                out[b, h, i] = sum(w[j] / sum(w) * v[b, h, j] for j in range(i + 1))
    return out


@pytest.mark.parametrize("npos_max", [3, 64])  # 3: most counts hit the cap
def test_attention_matches_the_pairwise_definition(npos_max):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 12, 4, generator=g, dtype=torch.float64) * 2 for _ in range(3))
    pe = cope(npos_max).double()
    pos = torch.arange(12)
    got, _ = content_attention(q, k, v, pos, pos, pe)
    expected = reference(q, k, v, pe.table.detach(), npos_max)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_worked_counts():
    # One query, three keys with scores 0 (gate 0.5), ln 3 (gate 0.75) and itself at 0 (0.5):
    # counts from each key to the query: 0.5 + 0.75 + 0.5 = 1.75, 0.75 + 0.5 = 1.25, 0.5.
    pe = cope(npos_max=8)
    scores = torch.tensor([[[[0.0, math.log(3.0), 0.0]]]])
    torch.testing.assert_close(pe.counts(scores), torch.tensor([[[[1.75, 1.25, 0.5]]]]))
    # A masked (future) key counts 0 and adds nothing to the keys before it.
    masked = torch.tensor([[[[0.0, 0.0, float("-inf")]]]])
    torch.testing.assert_close(pe.counts(masked), torch.tensor([[[[1.0, 0.5, 0.0]]]]))
    # Capped at npos_max - 1.
    assert cope(npos_max=2).counts(torch.full((1, 1, 1, 9), 5.0)).max() == 1


def test_a_zero_table_is_plain_causal_attention():
    pe = build_pe("cope", PEContext(8, 2, 4, 16))  # the table starts at zero, as in the paper
    q, k, v = (torch.randn(2, 2, 140, 4) for _ in range(3))  # crosses a 128-query block
    pos = torch.arange(140)
    got, weights = content_attention(q, k, v, pos, pos, pe, need_weights=True)
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 140))


def test_the_table_learns_and_generation_equals_recomputation():
    model = GPT(ModelConfig(vocab_size=30, d_model=16, n_layers=2, n_heads=2, pe="cope")).eval()
    with torch.no_grad():
        model.pe.table.normal_()
    idx = torch.randint(0, 30, (2, 40))
    out = model(idx, targets=idx)
    out["loss"].backward()
    assert model.pe.table.grad.abs().sum() > 0
    with torch.no_grad():
        full = model(idx)["logits"]
        cache = model.new_cache()
        steps = [model(idx[:, :10], cache=cache)["logits"]]
        steps += [model(idx[:, t : t + 1], cache=cache)["logits"] for t in range(10, 40)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def test_config_checks():
    assert RunConfig.from_dict(run_config("pe=cope", "pe.npos_max=16").to_dict()).pe.params == {
        "npos_max": 16
    }
    with pytest.raises(PosexpError, match="pe.npos_max must be a positive integer"):
        run_config("pe=cope", "pe.npos_max=0")
    with pytest.raises(PosexpError, match="pe=cope has none"):
        run_config("pe=cope", "+pe.randomized=true", "+pe.max_position=100")
