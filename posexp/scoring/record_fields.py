"""What a stored evaluation record may hold: its scorer's fields and ranges, and its spec.

``Record.from_dict`` (``posexp.scoring.records``) checks each record it reads with these, so a
damaged one is one line naming the field and what it allows.
"""

from __future__ import annotations

import math
from typing import Any

from posexp import checks
from posexp.errors import PosexpError
from posexp.extension.spec import MethodSpec

PRECISIONS = ("fp32", "bf16")
# The scorer's fields a record may hold, and what each allows (anything else is not a record's).
COUNTS = ("tokens", "examples")  # how much was scored: integers >= 0
MEASURES = {  # a measured value: its rule (``checks.RULES``); ppl and loss may be inf (diverged)
    "ppl": ">= 1",
    "loss": ">= 0",
    "accuracy": "in [0, 1]",
    "token_accuracy": "in [0, 1]",
    "score": "in [0, 1]",
}
# Lengths past this are no evaluation posexp makes (a damaged file's 1e30 is not one).
MAX_LENGTH = 2**40


def record_spec(d: dict[str, Any], where: str) -> MethodSpec:
    """The spec a record names, as fields, checked by the method's declared settings."""
    from posexp.extension.spec import checked_spec

    baked = d.get("baked", False)
    if not isinstance(baked, bool):
        raise PosexpError(f"{where}.baked must be true or false, got {baked!r}")
    spec = checks.mapping(f"{where}.spec", d.get("spec"))
    extra = set(spec) - {"settings", "factor"}
    if extra:
        raise PosexpError(
            f"{where}.spec has unknown keys {sorted(extra)}; allowed: settings, factor"
        )
    return checked_spec(
        d["method"],
        checks.mapping(f"{where}.spec.settings", spec.get("settings")),
        spec.get("factor"),
        baked,
        f"{where}.spec",
    )


def record_value(
    name: str,
    key: str,
    value: Any,
    declared: tuple[str, ...] = (),
    lists: tuple[str, ...] = (),
) -> Any:
    """One of the scorer's fields, checked by what it is: a count, a measure, per-position, a
    list of numbers of a field the scorer declares a list (``lists``: a curve over buckets,
    None where nothing was measured), or a number of a field it declares (``declared``)."""
    if value is None:
        return None
    if key in lists:
        if not isinstance(value, list) or not all(v is None or checks._is_number(v) for v in value):
            raise PosexpError(f"{name} must be a list of numbers (or nulls), got {value!r}")
        return value
    if key in COUNTS:
        return checks.integer(name, value, low=0)
    if key in MEASURES:
        if checks._is_number(value) and math.isnan(value):
            return float(value)  # nothing to measure (a task size with no instance)
        if checks._is_number(value) and value == math.inf and key in ("ppl", "loss"):
            return float(value)  # a diverged model's: measured, and shown as inf
        return checks.number(name, value, MEASURES[key])
    if key == "per_position":
        if not isinstance(value, list) or not all(v is None or checks._is_number(v) for v in value):
            raise PosexpError(f"{name} must be a list of numbers, got {value!r}")
        return value
    if key in declared:
        if not checks._is_number(value):
            raise PosexpError(f"{name} must be a number, got {value!r}")
        return value
    allowed = [*MEASURES, *COUNTS, "per_position", *(d for d in declared if d not in MEASURES)]
    allowed += [d for d in lists if d not in allowed]
    raise PosexpError(
        f"{name}: not a field of an evaluation record; allowed: {', '.join(dict.fromkeys(allowed))}"
    )
