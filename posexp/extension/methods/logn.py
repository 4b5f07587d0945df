"""Log-length attention scaling (Chiang and Cholak 2022; Qwen's "logn"; YaRN's attention factor).

Past the training length L0 the softmax spreads over more keys and flattens; multiplying the
logits of a query at position p by max(1, log_b(p + 1)), b = L0 by default, keeps its entropy
closer to what training saw. Applied to the query vector, so it works with every encoding and
kernel (the content score q·k is scaled; an additive bias is not) and with the KV cache.
"""

from __future__ import annotations

from typing import Any

from posexp import checks
from posexp.extension.attention import (
    AttentionPlan,
    AttentionSpec,
    log_length_scale,
    register_attention_method,
)
from posexp.extension.settings import Setting


def base_length_or_null(name: str, value: Any) -> int | None:
    """An integer >= 2 (the base of a logarithm), or None."""
    return checks.integer(name, value, low=2, allow_none=True)


SETTINGS = (
    Setting(
        "base_length",
        "b: an integer >= 2, the length from which logits are scaled up; null = L0",
        base_length_or_null,
        null_means=lambda given, s, l0: l0,
    ),
)


def logn(spec: AttentionSpec, *, base_length: int | None = None) -> AttentionPlan:
    """Queries at position p scaled by max(1, log_b(p + 1)), b = ``base_length`` or L0."""
    b = spec.original_length if base_length is None else base_length
    return AttentionPlan(query_scale=lambda pos: log_length_scale(pos, b))


register_attention_method("logn", acts_on="logits", uses_factor=False, settings=SETTINGS)(logn)
