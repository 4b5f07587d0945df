"""An extension method's settings, declared once: their names, what each allows, how it is checked.

A method module lists its ``Setting``s where it registers (``register_extension(...,
settings=...)``); the registry checks that they are exactly the method's keyword-only
parameters, so a setting cannot exist in the code and not in the checks (or the reverse).
``posexp methods`` prints them, ``method_params`` checks values with them, and every message
names the setting with a prefix chosen by the caller: ``extension.group`` for a config key,
``group`` inside a method spec ``self_extend(group=4)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from posexp import checks
from posexp.errors import PosexpError

# (user-facing name, value) -> the value in normal form, else a one-line PosexpError.
Checker = Callable[[str, Any], Any]
# (the settings before this one, at their effective values; factor s; training length L0) ->
# the value null stands for.
NullMeans = Callable[[Mapping[str, Any], float, int], Any]
# (user-facing name, effective value, training length L0) -> None, else a one-line PosexpError:
# what a value must satisfy once L0 is known (a window below L0), checked without building.
AtLength = Callable[[str, Any, int], None]


@dataclass(frozen=True)
class Setting:
    """One setting of a method: its name, the values it allows (in words), its checker, and
    the value null stands for once s and L0 are known (None: null is a mode of its own, such as
    ReRoPE's hard clip, or a per-pair list derived at use)."""

    name: str
    allowed: str  # shown by `posexp methods`: the range and what null means
    check: Checker
    null_means: NullMeans | None = None
    at_length: AtLength | None = None


def below_length(name: str, value: Any, original_length: int) -> None:
    """A window must be in [1, L0 - 1]: the distances it keeps must be ones training saw."""
    if value is not None and not 1 <= value < original_length:
        raise PosexpError(
            f"{name} must be in [1, {original_length - 1}] (below the training length "
            f"{original_length}), got {value}"
        )


def half_length(name: str, value: Any, original_length: int) -> None:
    """A block must be at most L0 / 2: two blocks must fit in the training length."""
    if value is not None and 2 * value > original_length:
        raise PosexpError(
            f"{name} must be at most L0 / 2 = {original_length // 2} (two blocks must fit in "
            f"the training length {original_length}), got {value}"
        )


def positive_int_or_null(name: str, value: Any) -> int | None:
    """An integer >= 1, or None."""
    return checks.positive_int(name, value, allow_none=True)


def number_rule(rule: str, allow_none: bool = False) -> Checker:
    """A checker for finite numbers obeying ``rule`` (a key of ``checks.RULES``)."""

    def check(name: str, value: Any) -> float | None:
        return checks.number(name, value, rule, allow_none=allow_none)

    return check


def flag(name: str, value: Any) -> bool:
    """true or false."""
    return checks.boolean(name, value)


# The factor s is common to every method that scales with it (``uses_factor``): a method spec
# may fix it (``yarn(factor=4)``); otherwise an evaluation takes length / L0.
FACTOR = Setting(
    "factor",
    "a number >= 1 (fixed at every length)",
    number_rule(">= 1"),
)

# The settings the position-remapping methods share (Self-Extend, ReRoPE).
WINDOW_TEXT = "an integer in [1, L0 - 1] (L0: the training length)"
LOGN = Setting("logn", "true or false: also scale logits by max(1, log_L0(p + 1))", flag)
