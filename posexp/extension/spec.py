"""Method specs: an extension method with settings, written ``name(key=value,...)``.

One syntax wherever a method is named (``eval-extrapolate --method``, ``report --method``, a
preset's ``extrapolate.method``, ``extension=`` at training, scripts/passkey.py): the same string
in a shell (quoted) and in YAML. Values parse as YAML scalars (``4``, ``0.5``, ``true``,
``null``); a bare name means the method's defaults; ``factor`` may be set for every method that
scales with one. A list is comma-separated outside parentheses::

    none,self_extend(group=4,window=16),yarn(beta_fast=16)

A spec is checked where it is parsed, by the method's own settings (``posexp.extension.settings``):
an unknown method or setting, a wrong type or a value out of range is one line naming the spec,
the setting, the bad value and what is allowed. Its ``label`` is canonical, the settings that
differ from the defaults in name order, so two spellings of one setting are one label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from posexp.errors import PosexpError
from posexp.extension.registry import EXTENSIONS, get_extension, method_params

# The extension a fine-tuned run was trained with, as a method name (``eval-extrapolate``).
BAKED = "baked"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class MethodSpec:
    """A method and the settings a spec gave it (checked, normal form; absent ones: default)."""

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    factor: float | None = None

    @property
    def label(self) -> str:
        """``name``, or ``name(key=value,...)`` with the settings that differ from the defaults."""
        if self.name == BAKED:
            return BAKED
        defaults = method_params(get_extension(self.name), {})
        changed = {k: v for k, v in self.settings.items() if defaults.get(k) != v}
        if self.factor is not None:
            changed["factor"] = self.factor
        if not changed:
            return self.name
        return (
            f"{self.name}({','.join(f'{k}={format_value(changed[k])}' for k in sorted(changed))})"
        )

    @property
    def params(self) -> dict[str, Any]:
        """Every setting of the method at its effective value (the defaults filled in)."""
        return method_params(get_extension(self.name), self.settings)

    def __str__(self) -> str:
        return self.label


def format_value(value: Any) -> str:
    """A setting's value as a spec writes it: ``4``, ``0.5``, ``true``, ``null``, ``[1,1.5,2]``."""
    if isinstance(value, (list, tuple)):
        return f"[{','.join(format_value(v) for v in value)}]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
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
    """A setting's value as a YAML scalar (``4`` an int, ``abc`` a string, ``null`` None) or a
    flat list of them (``[1,1.5,2]``, LongRoPE's per-pair factors)."""
    import yaml

    def scalar(value: Any) -> bool:
        return value is None or isinstance(value, (bool, int, float, str))

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, list) and all(scalar(v) for v in value):
        return value
    return value if scalar(value) else text


def _split_outside_brackets(body: str) -> list[str]:
    """``body`` cut at the commas outside ``[...]`` (a list value keeps its commas)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    return [*parts, body[start:]]


def parse_spec(text: str, where: str = "--method", baked: bool = True) -> MethodSpec:
    """One spec, checked by its method's settings (``baked``: also the name ``baked``)."""
    text = str(text).strip()
    if len(split_specs(text, where)) > 1:  # also refuses unbalanced or nested parentheses
        raise PosexpError(f"{where} {text!r}: one method spec expected, got a comma list")
    name, _, rest = text.partition("(")
    name = name.strip()
    known = sorted([*EXTENSIONS, *([BAKED] if baked else [])])
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
        return MethodSpec(BAKED)
    return _checked(name, given, text, where)


def _pairs(text: str, body: str | None, where: str) -> dict[str, Any]:
    # "key=value,key=value" -> {key: value}; empty parentheses are the defaults.
    given: dict[str, Any] = {}
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
        given[key] = parse_value(value.strip())
    return given


def _checked(name: str, given: dict[str, Any], text: str, where: str) -> MethodSpec:
    method = get_extension(name)
    allowed = [s.name for s in method.spec_settings]
    for key in given:
        if key not in allowed:
            if not allowed:
                raise PosexpError(f"{where} {text!r}: {name} takes no settings, got {key!r}")
            raise PosexpError(
                f"{where} {text!r}: {name} has no setting {key!r}; allowed: {', '.join(allowed)}"
            )
    settings = {k: v for k, v in given.items() if k != "factor"}
    by_name = {s.name: s for s in method.spec_settings}
    try:
        checked = {k: by_name[k].check(k, v) for k, v in given.items()}
        method_params(method, settings, prefix="")  # the relations between settings
    except PosexpError as e:
        raise PosexpError(f"{where} {text!r}: {e}") from None
    factor = checked.pop("factor", None)
    return MethodSpec(name, {k: checked[k] for k in settings if checked[k] is not None}, factor)


def parse_specs(
    value: str | Sequence[Any] | None, where: str = "--method", baked: bool = True
) -> list[MethodSpec] | None:
    """Specs from a comma list or several (a repeated option, a YAML list), in order, without
    duplicate labels; None when none is given."""
    if value is None:
        return None
    values = [value] if isinstance(value, str) else list(value)
    texts = [t for v in values for t in split_specs(str(v), where)]
    if "" in texts:  # `--method ''` or `none,,pi`: a typo, not "every method"
        raise PosexpError(
            f"{where} has an empty name in {value!r}; allowed: "
            f"{', '.join(sorted([*EXTENSIONS, *([BAKED] if baked else [])]))}"
        )
    specs = {}
    for text in texts:
        spec = parse_spec(text, where, baked)
        specs.setdefault(spec.label, spec)
    return list(specs.values()) or None


def spec_of(method: str, params: Mapping[str, Any], factor: float | None = None) -> MethodSpec:
    """The spec of a method set up with ``params`` (a config's extension, e.g. a fine-tune's)."""
    method_obj = get_extension(method)
    full = method_params(method_obj, params)
    defaults = method_params(method_obj, {})
    return MethodSpec(method, {k: v for k, v in full.items() if defaults.get(k) != v}, factor)


def base_method(label: str) -> str:
    """The method a label names: ``self_extend(group=4)`` -> ``self_extend``, ``baked:yarn`` ->
    ``yarn``, ``none [tokens 2,048]`` -> ``none``."""
    return re.match(r"[\w:]*", label).group(0).split(":")[-1]


def method_order(label: str) -> tuple[int, str]:
    """Sort key for method labels: registry order of the method's name, then the label."""
    name = base_method(label)
    names = EXTENSIONS.names()
    return (-1 if ":" in label else names.index(name) if name in names else len(names), label)
