"""NoPE: no positional encoding; a causal decoder still infers order from the mask."""

from posexp.pe.base import PositionalEncoding, register_pe


@register_pe("none")
class NoPositionalEncoding(PositionalEncoding):
    """Adds nothing; all hooks keep their identity defaults."""

    label, order, family = "NoPE", 0, "none"
