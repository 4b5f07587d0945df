"""The report's views, one module each (extrapolation, head ablation, length generalization,
passkey); every module here registers its own when this package is imported, except
``findings`` and ``unigram``, which hold what they compare with (configs/findings.yaml, the
test text's unigram perplexity)."""

from posexp.commands.report import view
from posexp.commands.report.view import ReportView
from posexp.registry import discover

discover(__name__, __path__)


def load_views() -> list[ReportView]:
    """Every registered view, in report order."""
    return sorted(view.REPORT_VIEWS.values(), key=lambda v: (v.order, v.name))
