"""The progress of an evaluation: one bar over every cell (tokens read, rate and ETA, cells
done) in the main process, and a worker's side of it, sent to the main process with each cell's
record as it is done."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from posexp.scoring.records import Record

if TYPE_CHECKING:
    from posexp.commands.extrapolate.plan import RunPlan

# The bar counts the tokens of every cell together (the cells' own sizes differ): it says so.
BAR = (
    "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} tokens "
    "[{elapsed}<{remaining}, {rate_fmt}{postfix}]"
)


class Progress:
    """One bar over every cell of an evaluation: tokens read, rate, ETA, and cells done."""

    def __init__(self, tokens: int, cells: int, show: bool | None, desc: str = "scoring") -> None:
        from tqdm import tqdm

        self.cells, self.done, self.tokens = cells, 0, 0
        self.bar = tqdm(
            total=tokens,
            desc=desc,
            unit="tok",
            unit_scale=True,
            disable=None if show is None else not show,
            dynamic_ncols=True,
            bar_format=BAR,
        )
        self.bar.set_postfix_str(self._cells(), refresh=False)

    @property
    def disable(self) -> bool:
        return bool(self.bar.disable)

    @property
    def total(self) -> int:
        return int(self.bar.total or 0)

    def _cells(self) -> str:
        return f"{self.done}/{self.cells} cells done"

    def update(self, tokens: int) -> None:
        """``tokens`` more read."""
        self.tokens += tokens  # tqdm leaves bar.n at 0 when the bar is disabled
        self.bar.update(tokens)

    def cell_done(self) -> None:
        """One more cell scored."""
        self.done += 1
        self.bar.set_postfix_str(self._cells())

    def summary(self) -> str:
        """Where the whole evaluation is, for a plain line: cells and tokens of all of them."""
        return f"in all {self._cells()}, {self.tokens:,}/{self.total:,} tokens"

    def close(self) -> None:
        self.bar.close()


def scoring_text(plans: list[RunPlan]) -> str:
    """What an evaluation scores, as its bar names it: ``scoring 3 lengths × 2 methods``, or
    ``scoring 5 cells (3 lengths, 2 methods)`` where not every combination is still to score."""
    items = [item for plan in plans for item in plan.todo]
    counts = {
        "run": len(plans),
        "length": len({i.record.length for i in items}),
        "method": len({i.record.spec for i in items}),
        "protocol": len({i.record.protocol for i in items}),
        "key depth": len({i.record.depth for i in items}),
        "task": len({i.record.task for i in items}),
    }
    shown = [(n, w) for w, n in counts.items() if n > 1 or w in ("length", "method")]
    parts = [f"{n} {w}{'s' if n != 1 else ''}" for n, w in shown]
    if math.prod(n for n, _ in shown) == len(items):
        return "scoring " + " × ".join(parts)
    return f"scoring {len(items)} cells ({', '.join(parts)})"


class QueueProgress:
    """A worker's side of ``Progress``: what it reads and finishes, sent to the main process,
    each cell with its record (``new``: the list ``score_cells`` appends a cell's record to
    before it counts the cell done)."""

    def __init__(
        self, events: Any, disable: bool, total: int, run_dir: str, new: list[Record]
    ) -> None:
        self.events, self.disable, self.total = events, disable, total
        self.run_dir, self.new = run_dir, new

    def update(self, tokens: int) -> None:
        self.events.put(("tokens", tokens))

    def cell_done(self) -> None:
        self.events.put(("cell", (self.run_dir, self.new[-1].to_dict())))
