"""The evaluation axis: scorers (one module each, found by name) and the records they make.

``registry`` says what a scorer is; ``records`` what a record is, its key and where records are
kept. Each other module of this package registers one scorer when the package is imported.
"""

from posexp.registry import discover
from posexp.scoring.registry import (
    ACCURACY,
    ALIASES,
    PPL,
    SCORERS,
    TASK,
    TEXT,
    Metric,
    Scorer,
    Scoring,
    Work,
    get_scorer,
    metric_of,
    parse_protocols,
    register_scorer,
    scorer_names,
)

# The built-in scorers in the order tables and plots show them; any other module follows.
for _name in ("nonoverlap", "sliding", "doc_position", "context_gain", "exact_match"):
    __import__(f"{__name__}.{_name}")
discover(__name__, __path__, skip=("registry", "records", "text", "windows"))

__all__ = [
    "ACCURACY",
    "ALIASES",
    "PPL",
    "SCORERS",
    "TASK",
    "TEXT",
    "Metric",
    "Scorer",
    "Scoring",
    "Work",
    "get_scorer",
    "metric_of",
    "parse_protocols",
    "register_scorer",
    "scorer_names",
]
