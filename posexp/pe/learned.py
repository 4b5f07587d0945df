"""Learned absolute positions: one trainable row per position, up to ``max_len``."""

from __future__ import annotations

import torch
from torch import nn

from posexp.checks import positive_int
from posexp.errors import PosexpError
from posexp.pe.base import (
    PEContext,
    PositionalEncoding,
    PositionOutOfRange,
    position_divisor,
    register_pe,
)


@register_pe("learned")
class LearnedEncoding(PositionalEncoding):
    """Trainable table added to embeddings; PI reads fractional rows by linear interpolation."""

    kind = "embedding"
    label, order, family = "learned (APE)", 20, "absolute"

    @classmethod
    def check_params(cls, params: dict, seq_len: int) -> None:
        """The table must have a row for every training position."""
        max_len = positive_int("pe.max_len", params.get("max_len"), allow_none=True)
        if max_len is not None and max_len < seq_len:
            raise PosexpError(
                f"pe.max_len={max_len} is shorter than train.seq_len={seq_len}; "
                f"allowed: pe.max_len >= {seq_len} (or null for the training length)"
            )

    @classmethod
    def position_limit(cls, params: dict, seq_len: int) -> int:
        """The table's rows: pe.max_len, or the training length when it is null."""
        return int(params.get("max_len") or seq_len)

    def __init__(self, ctx: PEContext, max_len: int | None = None) -> None:
        super().__init__(ctx)
        self.max_len = positive_int("pe.max_len", max_len, allow_none=True) or ctx.train_length
        self.table = nn.Embedding(self.max_len, ctx.d_model)
        self.factor = position_divisor(ctx.extension)

    @property
    def max_positions(self) -> int:
        """The table's rows, stretched by a PI factor."""
        return self.max_len if self.factor == 1.0 else int(self.max_len * self.factor)

    def prepare(self, length: int, device: torch.device) -> None:  # checks only; no state
        """Refuse positions that have no row (a clear error instead of an index error)."""
        last = length - 1
        if self.factor == 1.0 and last >= self.max_len:
            raise PositionOutOfRange(
                f"position {last} is past the learned table (pe.max_len={self.max_len}); "
                f"use lengths <= {self.max_len} or extension=pi",
                reason=f"the learned position table has {self.max_len} rows and positions "
                "past them have no embedding (use --method pi)",
            )
        # PI stretches the table over max_len * s positions; the last fraction of a step past
        # the final row reuses that row, as RoPE's PI does with its last trained angle.
        limit = int(self.max_len * self.factor)
        if last >= limit:
            raise PositionOutOfRange(
                f"position {last} is past the learned table stretched by PI "
                f"(pe.max_len={self.max_len} x factor {self.factor:g} = {limit}); raise extension.factor",
                reason=f"the learned table stretched by PI covers {limit} positions "
                f"(pe.max_len={self.max_len} x factor {self.factor:g}); raise extension.factor",
            )

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Add the table rows for ``positions`` (interpolated when a PI factor is set)."""
        if self.factor == 1.0:
            return x + self.table(positions)
        scaled = positions.to(torch.float32) / self.factor
        lo = scaled.floor().long()
        hi = (lo + 1).clamp(max=self.max_len - 1)
        frac = (scaled - lo)[..., None].to(x.dtype)
        return x + self.table(lo) * (1 - frac) + self.table(hi) * frac
