"""The value checkers: good values come back normalised, bad ones are one line naming the setting."""

from __future__ import annotations

import inspect
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posexp import checks
from posexp.errors import PosexpError


def refused(message: str):
    """pytest.raises for a one-line PosexpError equal to ``message``."""
    return pytest.raises(PosexpError, match=f"^{re.escape(message)}$")


@pytest.mark.parametrize(
    ("low", "high", "value"), [(None, None, -7), (0, None, 0), (2, 26, 26), (None, 5, 5)]
)
def test_integer_accepts_values_in_range(low, high, value):
    assert checks.integer("data.symbols", value, low, high) == value


@pytest.mark.parametrize(
    ("low", "high", "value", "message"),
    [
        (None, None, True, "x.n must be an integer, got true"),
        (None, None, 2.0, "x.n must be an integer, got 2.0"),
        (0, None, -1, "x.n must be an integer >= 0, got -1"),
        (1, None, 0, "x.n must be a positive integer, got 0"),
        (2, None, False, "x.n must be an integer >= 2, got false"),
        (2, 26, 40, "x.n must be an integer in [2, 26], got 40"),
        (None, 5, 6, "x.n must be an integer <= 5, got 6"),
    ],
)
def test_integer_refuses_by_name(low, high, value, message):
    with refused(message):
        checks.integer("x.n", value, low, high)


def test_none_only_where_allowed():
    assert checks.integer("x.n", None, allow_none=True) is None
    assert checks.positive_int("train.threads", None, allow_none=True) is None
    assert checks.number("x.f", None, allow_none=True) is None
    with refused("train.threads must be a positive integer or null, got 0"):
        checks.positive_int("train.threads", 0, allow_none=True)
    with refused("train.max_steps must be a positive integer, got null"):
        checks.positive_int("train.max_steps", None)


@given(st.integers(min_value=1))
def test_positive_int_accepts_every_positive_int(n):
    assert checks.positive_int("heads", n) == n


@pytest.mark.parametrize("value", [True, False, 0, -3, 1.0, "4", [4]])
def test_positive_int_refuses_non_counts_and_bools(value):
    typed = {True: "true", False: "false"}[value] if isinstance(value, bool) else repr(value)
    with refused(f"heads must be a positive integer, got {typed}"):  # as YAML spells a bool
        checks.positive_int("heads", value)


@pytest.mark.parametrize("rule", sorted(checks.RULES))
def test_every_rule_names_itself_and_refuses_bools(rule):
    good = {
        "any": -2.5,
        "> 0": 0.1,
        ">= 0": 0,
        ">= 1": 1,
        "> 1": 1.5,
        "in [0, 1)": 0,
        "in (0, 1]": 1,
        "in [0, 1]": 1,
    }[rule]
    assert checks.number("train.lr", good, rule) == float(good)
    assert isinstance(checks.number("train.lr", good, rule), float)
    shown = "" if rule == "any" else f" {rule}"
    for bad, typed in (
        (True, "true"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ("0.1", "'0.1'"),
    ):
        with refused(f"train.lr must be a finite number{shown}, got {typed}"):
            checks.number("train.lr", bad, rule)


@pytest.mark.parametrize(
    ("rule", "bad"),
    [
        ("> 0", 0),
        (">= 0", -1e-9),
        (">= 1", 0.5),
        ("> 1", 1),
        ("in [0, 1)", 1),
        ("in (0, 1]", 0),
        ("in [0, 1]", 1.01),
    ],
)
def test_number_refuses_values_outside_the_rule(rule, bad):
    with refused(f"model.dropout must be a finite number {rule}, got {bad!r}"):
        checks.number("model.dropout", bad, rule)


def test_an_unknown_rule_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown rule '< 0'"):
        checks.number("x", 1, "< 0")


def test_boolean():
    assert checks.boolean("train.compile", True) is True
    assert checks.boolean("train.compile", False) is False
    for bad in (1, 0, "yes", None):
        with refused(f"train.compile must be true or false, got {bad!r}"):
            checks.boolean("train.compile", bad)


def test_path():
    assert checks.path("resume", "outputs/runs/x") == "outputs/runs/x"
    assert checks.path("resume", None) is None
    for bad in (True, 3, ["a"]):
        with refused(f"resume must be a path, got {bad!r}"):
            checks.path("resume", bad)


def test_mapping_and_known_keys():
    assert checks.mapping("train", None) == {}
    assert checks.mapping("train", {1: "a"}) == {"1": "a"}
    with refused("train must be a mapping of settings, got [1]"):
        checks.mapping("train", [1])
    checks.known_keys("train", ["lr"], ["lr", "min_lr"])
    with refused("unknown setting train.lrr; allowed: lr, min_lr"):
        checks.known_keys("train", ["lrr"], ["lr", "min_lr"])
    with refused("unknown setting attention.x; allowed: (none)"):
        checks.known_keys("attention", ["x"], [])


def _loader(corpus, cache_dir, files, encoding="utf-8", *, limit=None):
    return None


def _open_ended(name, **options):
    return None


def test_keyword_params_lists_options_and_their_defaults():
    params = checks.keyword_params(_loader, skip=("corpus", "cache_dir"))
    assert params == {"files": inspect.Parameter.empty, "encoding": "utf-8", "limit": None}


def test_takes_params():
    checks.takes_params(
        "data", "text", _loader, {"files": ["a"], "limit": 3}, skip=("corpus", "cache_dir")
    )
    with refused("missing parameter 'files' for data 'text'; set data.files"):
        checks.takes_params("data", "text", _loader, {}, skip=("corpus", "cache_dir"))
    with refused("unknown parameter 'fils' for data 'text'; allowed: files, encoding, limit"):
        checks.takes_params(
            "data", "text", _loader, {"files": [], "fils": []}, skip=("corpus", "cache_dir")
        )
    # **options: any key passes here; the function checks them itself.
    checks.takes_params("data", "synthetic", _open_ended, {"name": "x", "anything": 1})
