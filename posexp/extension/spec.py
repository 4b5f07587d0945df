"""Method specs: an extension method with settings, written ``name(key=value,...)``.

One syntax wherever a method is named (``eval-extrapolate --method``, ``report --method``, a
preset's ``extrapolate.method``, ``extension=`` at training, scripts/passkey.py): the same string
in a shell (quoted) and in YAML. Values are numbers as typed (``4``, ``0.5``, ``1e-3``, ``4e0``),
``true``, ``false``, ``null`` or a flat list ``[1,1.5,2]``; a bare name means the method's
defaults; ``factor`` may be set for every method that scales with one. A list of specs is
comma-separated outside parentheses, and a setting whose values are joined by ``|`` is a grid,
every combination one spec::

    none,self_extend(group=2|4|8,window=16|32),yarn(factor=4|8|16)

A spec is parsed once, here, into a ``MethodSpec`` that travels as it is to the kernel and into
the evaluation record; it is checked by the method's own settings (``posexp.extension.settings``):
an unknown method or setting, a wrong type or a value out of range is one line naming the spec,
the setting, the value as typed and what is allowed. Its ``label`` is for display only (never
parsed again): the settings that differ from the defaults in name order, each value exact
(Python's shortest round-trip form), so two spellings of one setting are one label and two
different values are two.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from posexp import checks
from posexp.errors import PosexpError
from posexp.extension.registry import EXTENSIONS, get_extension, method_params

# The extension a fine-tuned run was trained with, as a method name (``eval-extrapolate``).
BAKED = "baked"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A number as a user types it: Python's int and float syntax, which YAML 1.1 only partly reads
# (``1e-3`` and ``4e0`` are strings there).
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")
# Integers beyond this are not a setting anyone means (and overflow a float on the way).
_INT_LIMIT = 2**53


@dataclass(frozen=True)
class MethodSpec:
    """A method and the settings a spec gave it, checked and in normal form (absent: default).

    ``baked``: the extension a fine-tuned run was trained with (``name`` and ``settings`` are
    that extension's); the parser's ``baked`` spec is ``MethodSpec(BAKED)`` until a run names
    what its checkpoint holds.
    """

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    factor: float | None = None
    baked: bool = False

    @property
    def key(self) -> tuple:
        """What tells two specs apart (hashable; values exact, by their repr)."""
        return (
            self.name,
            self.baked,
            tuple(sorted((k, repr(v)) for k, v in self.settings.items())),
            None if self.factor is None else repr(float(self.factor)),
        )

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MethodSpec) and self.key == other.key

    @property
    def label(self) -> str:
        """For display: ``name``, or ``name(key=value,...)`` with the settings that differ from
        the defaults (``baked:`` before a fine-tune's own)."""
        if self.name == BAKED:
            return BAKED
        changed = self.changed
        text = self.name
        if changed:
            text += f"({','.join(f'{k}={format_value(changed[k])}' for k in sorted(changed))})"
        return f"{BAKED}:{text}" if self.baked else text

    @property
    def changed(self) -> dict[str, Any]:
        """The settings (and the factor) that differ from the method's defaults."""
        if self.name == BAKED:
            return {}
        defaults = method_params(get_extension(self.name), {})
        changed = {k: v for k, v in self.settings.items() if not _same(defaults.get(k), v)}
        if self.factor is not None:
            changed["factor"] = self.factor
        return changed

    @property
    def params(self) -> dict[str, Any]:
        """Every setting of the method at its effective value (the defaults filled in)."""
        return method_params(get_extension(self.name), self.settings)

    @property
    def sort_key(self) -> tuple:
        """Registry order of the method (a fine-tune's baked one first), then each setting in
        name order (as the label shows them), numerically (a default before any value given), then the factor:
        ``yarn(factor=4)`` before ``yarn(factor=16)``."""
        names = EXTENSIONS.names()
        order = -1 if self.name == BAKED or self.baked else names.index(self.name)
        declared = () if self.name == BAKED else get_extension(self.name).settings
        given = self.changed
        return (
            order,
            self.name,
            tuple(_order_value(n in given, given.get(n)) for n in sorted(s.name for s in declared)),
            _order_value(self.factor is not None, self.factor),
        )

    def __str__(self) -> str:
        return self.label


def _same(a: Any, b: Any) -> bool:
    # 16 and 16.0 are one value, True and 1 are not.
    return (
        type(a) is type(b)
        and a == b
        or (checks._is_number(a) and checks._is_number(b) and float(a) == float(b))
    )


def _order_value(given: bool, value: Any) -> tuple:
    if not given:
        return (0,)
    if value is None:
        return (1,)
    if isinstance(value, bool):
        return (2, int(value))
    if isinstance(value, (int, float)):
        return (3, float(value))
    if isinstance(value, (list, tuple)):
        return (4, tuple(_order_value(True, v) for v in value))
    return (5, str(value))


def format_value(value: Any) -> str:
    """A setting's value as a spec writes it, exactly: ``4``, ``0.5``, ``16.0000001``, ``true``,
    ``null``, ``[1,1.5,2]`` (a float by its shortest round-trip form, whole ones without .0)."""
    if isinstance(value, (list, tuple)):
        return f"[{','.join(format_value(v) for v in value)}]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    return str(value)


def split_specs(text: str, where: str = "--method") -> list[str]:
    """``text`` cut at the commas outside parentheses; unbalanced parentheses are refused."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
            if depth > 1:
                raise PosexpError(
                    f"{where} {text!r}: parentheses inside a spec; values are plain scalars, "
                    f"write name(key=value,...)"
                )
        elif ch == ")":
            depth -= 1
            if depth < 0:
                break
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise PosexpError(
            f"{where} {text!r}: unbalanced parentheses; write name(key=value,...), e.g. "
            f"self_extend(group=4,window=16)"
        )
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_value(text: str) -> Any:
    """A setting's value as typed: an int or a float in Python's syntax (``1e-3``, ``4e0``,
    ``0.00001``), ``true``/``false``/``null`` and other YAML scalars, or a flat list of them
    (``[1,1.5,2]``, LongRoPE's per-pair factors); anything else stays the text it was."""
    import yaml

    text = text.strip()
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)  # may be inf (1e999): the setting's check refuses it, as typed
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        items = [parse_value(t) for t in inner.split(",")] if inner else []
        if all(not isinstance(v, (list, dict)) for v in items):
            return items
        return text

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    scalar = value is None or isinstance(value, (bool, int, float, str))
    return value if scalar else text


def _split_outside_brackets(body: str, sep: str = ",") -> list[str]:
    """``body`` cut at each ``sep`` outside ``[...]`` (a list value keeps its commas)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += (ch == "[") - (ch == "]")
        if ch == sep and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    return [*parts, body[start:]]


def _known(baked: bool) -> list[str]:
    return sorted([*EXTENSIONS, *([BAKED] if baked else [])])


def expand_spec(text: str, where: str = "--method", baked: bool = True) -> list[MethodSpec]:
    """One spec, or a grid of them (values joined by ``|``: every combination, in the order
    written), each checked by its method's settings (``baked``: also the name ``baked``)."""
    text = str(text).strip()
    if len(split_specs(text, where)) > 1:  # also refuses unbalanced or nested parentheses
        raise PosexpError(f"{where} {text!r}: one method spec expected, got a comma list")
    name, _, rest = text.partition("(")
    name = name.strip()
    known = _known(baked)
    if not _NAME.fullmatch(name):
        raise PosexpError(
            f"{where} {text!r}: a spec is name or name(key=value,...); allowed names: "
            f"{', '.join(known)}"
        )
    if name not in known:
        raise PosexpError(f"{where} {text!r}: unknown method {name!r}; allowed: {', '.join(known)}")
    body = None
    if rest or text.endswith("("):
        if not rest.endswith(")"):
            raise PosexpError(f"{where} {text!r}: text after the closing parenthesis")
        body = rest[:-1].strip()
    given = _pairs(text, body, where)
    if name == BAKED:
        if given:
            raise PosexpError(
                f"{where} {text!r}: baked takes no settings (it is the extension the run was "
                f"fine-tuned with, as it was)"
            )
        return [MethodSpec(BAKED)]
    keys = list(given)
    return [
        _checked(name, dict(zip(keys, combo, strict=True)), text, where)
        for combo in itertools.product(*given.values())
    ]


def parse_spec(text: str, where: str = "--method", baked: bool = True) -> MethodSpec:
    """One spec, checked by its method's settings (``baked``: also the name ``baked``); a grid
    (``|``) is refused here: where one method is set up (training, generation) it is one."""
    specs = expand_spec(text, where, baked)
    if len(specs) > 1:
        raise PosexpError(
            f"{where} {str(text).strip()!r}: one setting each expected here, got a grid of "
            f"{len(specs)} (values joined by |)"
        )
    return specs[0]


def _pairs(text: str, body: str | None, where: str) -> dict[str, list[str]]:
    # "key=value,key=a|b" -> {key: [value], key: [a, b]}, the values as typed; empty
    # parentheses are the defaults.
    given: dict[str, list[str]] = {}
    if not body:
        return given
    for item in _split_outside_brackets(body):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not _NAME.fullmatch(key) or not value.strip():
            raise PosexpError(
                f"{where} {text!r}: {item.strip()!r} is not key=value; write "
                f"name(key=value,...), e.g. self_extend(group=4,window=16)"
            )
        if key in given:
            raise PosexpError(f"{where} {text!r}: {key} given twice")
        options = [v.strip() for v in _split_outside_brackets(value, "|")]
        if "" in options:
            raise PosexpError(
                f"{where} {text!r}: {key} has an empty value in {value.strip()!r}; a grid is "
                f"values joined by |, e.g. group=2|4|8"
            )
        if len(set(options)) < len(options):
            raise PosexpError(f"{where} {text!r}: {key} lists a value twice in {value.strip()!r}")
        given[key] = options
    return given


def _as_typed(message: str, value: Any, typed: str) -> str:
    # A check names the value it got in normal form (1e-05); the user typed 0.00001.
    if not checks._is_number(value):
        return message
    shown = checks.given(value)
    return message[: -len(shown)] + typed if message.endswith(shown) else message


def _checked(name: str, typed: dict[str, str], text: str, where: str) -> MethodSpec:
    method = get_extension(name)
    allowed = [s.name for s in method.spec_settings]
    for key in typed:
        if key not in allowed:
            if not allowed:
                raise PosexpError(f"{where} {text!r}: {name} takes no settings, got {key!r}")
            raise PosexpError(
                f"{where} {text!r}: {name} has no setting {key!r}; allowed: {', '.join(allowed)}"
            )
    given = {k: parse_value(v) for k, v in typed.items()}
    by_name = {s.name: s for s in method.spec_settings}
    checked = {}
    for k, v in given.items():
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > _INT_LIMIT:
            raise PosexpError(
                f"{where} {text!r}: {k} must be at most {_INT_LIMIT:,}, got {typed[k]}"
            )
        try:
            checked[k] = by_name[k].check(k, v)
        except PosexpError as e:
            raise PosexpError(f"{where} {text!r}: {_as_typed(str(e), v, typed[k])}") from None
    factor = checked.pop("factor", None)
    settings = {k: v for k, v in checked.items() if v is not None}
    try:
        method_params(method, settings, prefix="")  # the relations between settings
    except PosexpError as e:
        raise PosexpError(f"{where} {text!r}: {e}") from None
    return canonical(MethodSpec(name, settings, factor))


def checked_spec(
    name: str,
    settings: Mapping[str, Any],
    factor: Any = None,
    baked: bool = False,
    where: str = "spec",
) -> MethodSpec:
    """A spec from values already typed (a record's fields), checked as ``parse_spec`` checks
    one: a known method, its declared settings, each in range, their relations."""
    if name not in EXTENSIONS:
        raise PosexpError(f"{where}: unknown method {name!r}; allowed: {', '.join(_known(False))}")
    method = get_extension(name)
    by_name = {s.name: s for s in method.spec_settings}
    checked = {}
    for k, v in {**settings, **({} if factor is None else {"factor": factor})}.items():
        if k not in by_name:
            allowed = ", ".join(by_name) or "(none)"
            raise PosexpError(f"{where}: {name} has no setting {k!r}; allowed: {allowed}")
        checked[k] = by_name[k].check(f"{where}.{k}", v)
    factor = checked.pop("factor", None)
    settings = {k: v for k, v in checked.items() if v is not None}
    method_params(method, settings, prefix=f"{where}.")
    return canonical(MethodSpec(name, settings, factor, baked))


def parse_specs(
    value: str | Sequence[Any] | None, where: str = "--method", baked: bool = True
) -> list[MethodSpec] | None:
    """Specs from a comma list or several (a repeated option, a YAML list), grids expanded, in
    order, without duplicates; None when none is given."""
    if value is None:
        return None
    values = [value] if isinstance(value, str) else list(value)
    texts = [t for v in values for t in split_specs(str(v), where)]
    if "" in texts:  # `--method ''` or `none,,pi`: a typo, not "every method"
        raise PosexpError(
            f"{where} has an empty name in {value!r}; allowed: {', '.join(_known(baked))}"
        )
    specs: dict[tuple, MethodSpec] = {}
    for text in texts:
        for spec in expand_spec(text, where, baked):
            specs.setdefault(canonical(spec).key, spec)
    return list(specs.values()) or None


def canonical(spec: MethodSpec) -> MethodSpec:
    """``spec`` with only the settings that differ from the defaults (``yarn(beta_fast=32)`` is
    ``yarn``): two spellings of one spec compare equal. Every parsed spec is in this form."""
    if spec.name == BAKED:
        return spec
    changed = spec.changed
    factor = changed.pop("factor", None)
    return MethodSpec(spec.name, changed, factor, spec.baked)


def spec_of(
    method: str, params: Mapping[str, Any], factor: float | None = None, baked: bool = False
) -> MethodSpec:
    """The spec of a method set up with ``params`` (a config's extension, e.g. a fine-tune's)."""
    method_obj = get_extension(method)
    full = method_params(method_obj, params)
    defaults = method_params(method_obj, {})
    changed = {k: v for k, v in full.items() if not _same(defaults.get(k), v)}
    return MethodSpec(method, changed, factor, baked)
