"""Abacus embeddings (McLeish et al. 2024): each digit embeds its place within its number.

A digit that is the k-th of a run of consecutive digits reads row k of a trainable table; any
other token reads row 0, which stays zero. With numbers written least significant digit first,
row k then means "place value 10^(k-1)" in every operand and in the answer, so the digits an
answer digit needs share its row whatever the numbers' length. Training adds one random offset
per row to every digit's k (k -> k + offset, drawn from 0..``max_digits`` minus the longest
number in the batch), so every row of the table is trained and a number longer than any seen in
training still reads trained rows; evaluation uses the offset 0.

It reads the tokens, not their positions: the digit ids are the byte tokenizer's '0'..'9', and
the run config refuses it for anything but a task with numbers and ``tokenizer=byte``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posexp.checks import positive_int
from posexp.pe.base import PEContext, PositionalEncoding, PositionOutOfRange, register_pe

DIGIT_IDS = tuple(range(ord("0"), ord("9") + 1))  # the byte tokenizer's ids of '0'..'9'


def digit_places(tokens: torch.Tensor, carried: torch.Tensor | None = None) -> torch.Tensor:
    """Place of each token (B, T) within its run of consecutive digits (1, 2, ...), 0 for a
    non-digit; ``carried`` (B,): the run length just before the first token (decoding)."""
    is_digit = torch.isin(tokens, torch.tensor(DIGIT_IDS, device=tokens.device))
    count = is_digit.long().cumsum(-1)
    if carried is not None:
        count = count + carried[:, None]
    # Digits counted up to the last non-digit, carried forward: subtracting it restarts the
    # count at each new number.
    at_breaks = torch.where(is_digit, torch.zeros_like(count), count)
    restart = at_breaks.cummax(-1).values
    return torch.where(is_digit, count - restart, torch.zeros_like(count))


@register_pe("abacus")
class AbacusEncoding(PositionalEncoding):
    """A trainable row per place within a number, added to the digits' embeddings."""

    kind = "embedding"
    # Its "positions" are places within numbers: PI's position scaling has no meaning there,
    # so only what acts on the logits applies.
    accepts = frozenset({"logits"})
    reads_digits = True
    label, order, family = "Abacus", 25, "absolute"

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """``pe.max_digits`` (the table's rows past row 0) is a positive integer."""
        positive_int("pe.max_digits", params.get("max_digits", 128))

    def __init__(self, ctx: PEContext, max_digits: int = 128) -> None:
        super().__init__(ctx)
        self.max_digits = positive_int("pe.max_digits", max_digits)
        self.table = nn.Embedding(self.max_digits + 1, ctx.d_model, padding_idx=0)

    def embed_tokens(
        self,
        x: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        memo: dict[str, Any] | None = None,
    ) -> torch.Tensor:
        """Add each digit's place row (offset at random in training); ``memo`` carries the
        current run of digits across decoding steps."""
        carried = None if memo is None else memo.get("abacus_run")
        places = digit_places(tokens, carried)
        if memo is not None:
            memo["abacus_run"] = places[:, -1]
        longest = int(places.max()) if places.numel() else 0
        if longest > self.max_digits:
            raise PositionOutOfRange(
                f"a number of more than {self.max_digits} digits is past the Abacus table "
                f"(pe.max_digits={self.max_digits}); raise pe.max_digits"
            )
        if self.training and longest:
            offset = torch.randint(
                0, self.max_digits - longest + 1, (tokens.shape[0], 1), device=tokens.device
            )
            places = torch.where(places > 0, places + offset, places)
        return x + self.table(places)
