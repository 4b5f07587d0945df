"""Randomized positions (Ruoss et al. 2023): train on sorted random subsets of a larger range.

Each training row of length T gets T distinct positions drawn uniformly from [0, M) and sorted,
so a model trained on short rows still sees (and learns to use) the position values, and the
gaps between them, that longer test rows will have. The draw is a pure function of (seed, step),
so a resumed run draws the same positions. Task rows are scored with positions drawn the same
way (``scoring_positions``), as the method's reference implementation does at test time too:
consecutive positions 0..T-1, all gaps 1, are a draw training almost never made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from posexp import checks
from posexp.errors import PosexpError


def random_positions(
    rows: int, length: int, max_position: int, seed: int, step: int
) -> torch.Tensor:
    """(rows, length) int64: per row, ``length`` distinct sorted values from [0, max_position)."""
    if length > max_position:
        raise ValueError(f"cannot draw {length} distinct positions below {max_position}")
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**63)
    # The first `length` of a random permutation per row are a uniform subset without repeats.
    keys = torch.rand(rows, max_position, generator=g)
    return keys.topk(length, dim=1).indices.sort(dim=1).values


@dataclass(frozen=True)
class PositionSampling:
    """``pe.randomized`` / ``pe.max_position``: train on sorted random positions below M
    (Ruoss et al. 2023); scored task rows are positioned the same way (``scoring_positions``)."""

    KEYS: ClassVar[tuple[str, ...]] = ("randomized", "max_position")  # pe.* keys for any PE

    randomized: bool = False
    max_position: int | None = None

    @classmethod
    def from_pe(cls, pe: str, params: dict[str, Any], seq_len: int, row: int) -> PositionSampling:
        """Take the two keys out of the pe group's ``params`` and check them against the PE."""
        from posexp.pe import get_pe

        randomized, max_position = params.pop("randomized", False), params.pop("max_position", None)
        if not checks.boolean("pe.randomized", randomized):
            if max_position is not None:
                raise PosexpError("pe.max_position only applies with pe.randomized=true")
            return cls()
        if get_pe(pe).kind in ("none", "content"):  # no position input to randomize
            raise PosexpError(
                f"pe.randomized=true needs a PE that takes positions; pe={pe} has none"
            )
        if max_position is None:
            raise PosexpError(
                f"pe.randomized=true needs pe.max_position (an integer above the "
                f"longest test length, >= the {row}-token training rows)"
            )
        m = checks.positive_int("pe.max_position", max_position)
        if m < row:
            raise PosexpError(
                f"pe.max_position={m} is below the {row}-token training rows; allowed: "
                f"pe.max_position >= {row}"
            )
        rows = get_pe(pe).position_limit(params, seq_len)
        if rows is not None and rows < m:
            raise PosexpError(
                f"pe.max_position={m} is past what pe={pe} can represent ({rows} "
                f"positions); allowed: pe.max_position <= {rows}"
            )
        return cls(True, m)


# (rows, length, batch index) -> positions (rows, length) for one scored batch.
PositionDraw = Callable[[int, int, int], torch.Tensor]
SCORING_SEED = 0x5C0BE  # fixed: every evaluation of a run scores the same draws


def scoring_positions(sampling: PositionSampling) -> PositionDraw | None:
    """How to position scored task rows: drawn as in training for a randomized run (a fixed
    seed, one draw per batch), None (0..T-1) for any other run, PoSE runs included (their
    skipped positions are a training-time method, and PoSE excludes pe.randomized)."""
    if not sampling.randomized:
        return None
    m = sampling.max_position

    def draw(rows: int, length: int, batch: int) -> torch.Tensor:
        if length > m:
            raise PosexpError(
                f"a scored row of {length} tokens is longer than pe.max_position={m}, the range "
                f"its positions are drawn from; train with pe.max_position >= {length}"
            )
        return random_positions(rows, length, m, SCORING_SEED, batch)

    return draw
