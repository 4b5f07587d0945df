"""Training objectives, one module each, keyed by the corpus kind they train on.

An objective says what a batch is and what evaluation reports (``base.Objective``). Every
module of this package registers its own (``lm``, ``pairs``, ``synthetic``) when the package is
imported; a new kind is one new module.
"""

from posexp.objectives.base import (
    OBJECTIVES,
    Autocast,
    Objective,
    build_objective,
    mean_loss,
    register_objective,
)
from posexp.registry import discover

discover(__name__, __path__, skip=("base",))

__all__ = [
    "OBJECTIVES",
    "Autocast",
    "Objective",
    "build_objective",
    "mean_loss",
    "register_objective",
]
