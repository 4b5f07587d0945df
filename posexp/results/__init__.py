"""The evaluation-results library: every table, figure, TensorBoard view, verdict sentence and
export of `posexp eval-extrapolate` and `posexp report` is a function of the results table."""

from posexp.results.table import COLUMNS, load_results

__all__ = ["COLUMNS", "load_results"]
