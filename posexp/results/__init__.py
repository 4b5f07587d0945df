"""The evaluation-results library: every table, figure, TensorBoard view, verdict sentence and
export of `posexp eval-extrapolate` and `posexp report` is a function of the results table
(``posexp.results.table``)."""

from __future__ import annotations

from typing import Any

__all__ = ["COLUMNS", "load_results"]


def __getattr__(name: str) -> Any:
    # The table needs pandas: imported when asked for, so a module that needs only labels or
    # styles (training's TensorBoard names, `posexp runs`) does not pay for it.
    if name in __all__:
        from posexp.results import table

        return getattr(table, name)
    raise AttributeError(f"module 'posexp.results' has no attribute {name!r}")
