"""Results: every stored evaluation as one typed table, and the views drawn from it."""

from posexp.results.table import COLUMNS, load_results

__all__ = ["COLUMNS", "load_results"]
