"""Blockwise causal attention (Sun et al. 2022, the xPos paper, §3.3), at evaluation only.

Positions are cut into blocks of b = L0/2; a query in block n attends only to the keys of
blocks n - 1 and n (and, causally, none after itself). Every attended distance thus stays below
2b = L0, the longest training saw, however long the input, while each query still sees at least
b keys of context (all of them inside the first two blocks). The paper evaluates ALiBi, RoPE and
xPos with and without it; like log scaling it changes only which logits count, so it applies to
every encoding.
"""

from __future__ import annotations

from posexp.errors import PosexpError
from posexp.extension.attention import AttentionPlan, AttentionSpec, register_attention_method
from posexp.extension.settings import Setting, half_length, positive_int_or_null

SETTINGS = (
    Setting(
        "block",
        "b: an integer in [1, L0 / 2]; null = L0 / 2",
        positive_int_or_null,
        null_means=lambda given, s, l0: max(1, l0 // 2),
        at_length=half_length,
    ),
)


def blockwise(spec: AttentionSpec, *, block: int | None = None) -> AttentionPlan:
    """Blocks of ``block`` positions (null: L0 / 2); a query sees its block and the one before."""
    l0 = spec.original_length
    b = max(1, l0 // 2) if block is None else block
    if 2 * b > l0:
        raise PosexpError(
            f"extension.block must be at most L0 / 2 = {l0 // 2} (two blocks must fit in the "
            f"training length {l0}), got {b}"
        )
    return AttentionPlan(block=b)


CAVEAT = (
    "each query sees only its own block and the one before (b = L0 / 2 by default): at most "
    "L0 tokens of context however long the input, so its ppl at long lengths is that of a "
    "short-context model"
)
register_attention_method(
    "blockwise", acts_on="logits", uses_factor=False, settings=SETTINGS, caveat=CAVEAT
)(blockwise)
