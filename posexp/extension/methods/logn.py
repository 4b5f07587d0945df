"""Log-length attention scaling (Chiang and Cholak 2022; Qwen's "logn"; YaRN's attention factor).

Past the training length L0 the softmax spreads over more keys and flattens; multiplying the
logits of a query at position p by max(1, log_L0(p + 1)) keeps its entropy closer to what
training saw. Applied to the query vector, so it works with every encoding and kernel (the
content score q·k is scaled; an additive bias is not) and with the KV cache.
"""

from __future__ import annotations

from posexp.extension.attention import (
    AttentionPlan,
    AttentionSpec,
    log_length_scale,
    register_attention_method,
)


def logn(spec: AttentionSpec) -> AttentionPlan:
    """Queries at position p scaled by max(1, log_L0(p + 1))."""
    l0 = spec.original_length
    return AttentionPlan(query_scale=lambda pos: log_length_scale(pos, l0))


register_attention_method("logn", acts_on="logits", uses_factor=False)(logn)
