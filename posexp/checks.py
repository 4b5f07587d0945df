"""Value checkers shared by the config, the extension methods, the encodings and the tasks.

Every checker takes the setting's user-facing name (``train.lr``, ``pe.base``, ``data.digits``)
and the raw value, returns the value in its normal form, and otherwise raises a one-line
``PosexpError`` that names the setting, what is allowed and what was given. ``bool`` is never a
number here: ``heads: true`` in YAML is a mistake, not 1.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from posexp.errors import PosexpError


def given(value: Any) -> str:
    """A value as the user typed it: YAML's and Hydra's true, false and null, else its repr."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return repr(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(
    name: str, value: Any, low: int | None = None, high: int | None = None, allow_none: bool = False
) -> int | None:
    """``value`` as an int in [low, high] (either end open when None), else a one-line error."""
    if value is None and allow_none:
        return None
    ok = _is_int(value) and (low is None or value >= low) and (high is None or value <= high)
    if not ok:
        if low is not None and high is not None:
            rule = f" in [{low}, {high}]"
        elif low is not None:
            rule = " (a positive integer)" if low == 1 else f" >= {low}"
        else:
            rule = "" if high is None else f" <= {high}"
        kind = "a positive integer" if low == 1 and high is None else f"an integer{rule}"
        extra = " or null" if allow_none else ""
        raise PosexpError(f"{name} must be {kind}{extra}, got {given(value)}")
    return value


def positive_int(name: str, value: Any, allow_none: bool = False) -> int | None:
    """``value`` as an integer >= 1 (None allowed when ``allow_none``), else a one-line error."""
    return integer(name, value, low=1, allow_none=allow_none)


# A number's allowed range, by name: the rule shown in the message and the test it stands for.
RULES: dict[str, Callable[[float], bool]] = {
    "any": lambda v: True,
    "> 0": lambda v: v > 0,
    ">= 0": lambda v: v >= 0,
    ">= 1": lambda v: v >= 1,
    "> 1": lambda v: v > 1,
    "in [0, 1)": lambda v: 0 <= v < 1,
    "in [0, 1]": lambda v: 0 <= v <= 1,
    "in (0, 1]": lambda v: 0 < v <= 1,
}


def number(name: str, value: Any, rule: str = "any", allow_none: bool = False) -> float | None:
    """``value`` as a finite float obeying ``rule`` (a key of ``RULES``), else a one-line error."""
    if value is None and allow_none:
        return None
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; known: {', '.join(RULES)}")
    if not (_is_number(value) and math.isfinite(value) and RULES[rule](value)):
        shown = "" if rule == "any" else f" {rule}"
        extra = " or null" if allow_none else ""
        raise PosexpError(f"{name} must be a finite number{shown}{extra}, got {given(value)}")
    return float(value)


def boolean(name: str, value: Any) -> bool:
    """``value`` as a bool (true or false in YAML), else a one-line error."""
    if not isinstance(value, bool):
        raise PosexpError(f"{name} must be true or false, got {value!r}")
    return value


def choice(name: str, value: Any, allowed: Iterable[str]) -> str:
    """``value`` if it is one of ``allowed``, else a one-line error listing them."""
    allowed = list(allowed)
    if value not in allowed:
        raise PosexpError(f"{name} must be one of {', '.join(allowed)}, got {given(value)}")
    return value


def path(name: str, value: Any) -> str | None:
    """``value`` as a path string, or None, else a one-line error (empty, not UTF-8)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise PosexpError(f"{name} must be a path, got {value!r}")
    return str(user_path(name, value))


def user_path(name: str, value: Any) -> Path:
    """A path the user gave (an option, an override, a found run dir) as a ``Path``; a one-line
    error for an empty one (it would mean the current folder) or a name that is not UTF-8
    (posexp writes paths into UTF-8 logs, reports and JSON)."""
    text = str(value) if isinstance(value, Path) else value
    if not isinstance(text, str) or not text.strip():
        raise PosexpError(f"{name} is an empty path; give a folder ('.' for the current one)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text)
        raise PosexpError(
            f"{name} {shown!r} is not a UTF-8 name; rename it (posexp writes paths into "
            f"UTF-8 logs, reports and JSON)"
        ) from None
    return Path(text)


def mapping(name: str, value: Any) -> dict[str, Any]:
    """``value`` as a plain dict (None is empty), else a one-line error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PosexpError(f"{name} must be a mapping of settings, got {value!r}")
    return {str(k): v for k, v in value.items()}


def known_keys(name: str, keys: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuse a key that is not among ``allowed``, naming the section and what it takes."""
    allowed = list(allowed)
    for key in keys:
        if key not in allowed:
            raise PosexpError(
                f"unknown setting {name}.{key}; allowed: {', '.join(allowed) or '(none)'}"
            )


def keyword_params(fn: Callable[..., Any], skip: Iterable[str] = ()) -> dict[str, Any]:
    """The keyword parameters ``fn`` declares, with their defaults (``inspect.Parameter.empty``
    for required ones): what a registered loader, task or method takes as its options."""
    skip = set(skip)
    return {
        p.name: p.default
        for p in inspect.signature(fn).parameters.values()
        if p.name not in skip and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def takes_params(
    kind: str,
    name: str,
    fn: Callable[..., Any],
    params: Mapping[str, Any],
    skip: Iterable[str] = (),
) -> None:
    """Refuse a key ``fn`` does not take and a required one that is absent (``kind.key`` named).

    A ``fn`` with ``**options`` takes any key; it checks them itself.
    """
    sig = inspect.signature(fn).parameters
    open_ended = any(p.kind is p.VAR_KEYWORD for p in sig.values())
    allowed = keyword_params(fn, skip)
    for key, default in allowed.items():
        if default is inspect.Parameter.empty and key not in params:
            raise PosexpError(f"missing parameter {key!r} for {kind} {name!r}; set {kind}.{key}")
    for key in params:
        if key not in allowed and not open_ended:
            raise PosexpError(
                f"unknown parameter {key!r} for {kind} {name!r}; "
                f"allowed: {', '.join(allowed) or '(none)'}"
            )
