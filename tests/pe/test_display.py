"""How encodings are shown: declared by each PE class, read through ``describe_pe``, and no PE
named anywhere else in the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import posexp
from posexp.config.paths import config_dir
from posexp.extension import EXTENSIONS
from posexp.pe import PE_REGISTRY
from posexp.pe.base import UNKNOWN_ORDER, describe_pe

PACKAGE = Path(posexp.__file__).resolve().parent


@pytest.mark.parametrize("pe", sorted(PE_REGISTRY))
def test_every_encoding_declares_its_label_order_and_family(pe):
    cls = PE_REGISTRY[pe]
    assert cls.label and cls.family and cls.order < UNKNOWN_ORDER
    shown = describe_pe(pe)
    assert (shown.label, shown.order, shown.family) == (cls.label, cls.order, cls.family)


def test_orders_and_labels_tell_the_encodings_apart():
    shown = [describe_pe(pe) for pe in PE_REGISTRY]
    assert len({s.order for s in shown}) == len({s.label for s in shown}) == len(shown)


def test_randomized_positions_and_unknown_names():
    plain, randomized = describe_pe("rope"), describe_pe("rope", randomized=True)
    assert randomized.label == f"{plain.label} + randomized" and randomized.family == plain.family
    assert sorted([randomized, describe_pe("alibi"), plain], key=lambda d: d.sort_key) == [
        plain,
        randomized,
        describe_pe("alibi"),
    ]
    gone = describe_pe("no_longer_exists")  # a run of a removed PE: its raw name, sorted last
    assert (gone.label, gone.order) == ("no_longer_exists", UNKNOWN_ORDER)
    assert max(describe_pe(p).sort_key for p in PE_REGISTRY) < gone.sort_key


# Config defaults name a PE on purpose: the default run's encoding, an example in a message.
ALLOWED = {("model/gpt.py", '"rope"'), ("config/sections.py", '"rope"')}


def pe_names() -> list[str]:
    """Registered encodings and their presets (configs/pe/, e.g. rope_randomized)."""
    presets = {p.stem for p in (Path(config_dir()) / "pe").glob("*.yaml")}
    return sorted(set(PE_REGISTRY) | presets)


def test_no_encoding_is_named_outside_posexp_pe():
    # "none" is also the no-op extension method's name, used as such all over the package, so
    # it is only looked for where it is compared with a PE; "path" (PaTH) is a word for files.
    words = {*EXTENSIONS, "path"}
    quoted = [q for n in pe_names() if n not in words for q in (f'"{n}"', f"'{n}'")]
    none_as_pe = re.compile(r"""\bpe\w*\s*[!=]=\s*["']none["']|["']none["']\s*[!=]=\s*\w*pe\b""")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("pe/"):
            continue
        text = path.read_text()
        found += [f"{rel}: {q}" for q in quoted if q in text and (rel, q) not in ALLOWED]
        found += [f"{rel}: {m.group(0)}" for m in none_as_pe.finditer(text)]
    assert found == []


def test_the_check_above_would_see_a_pe_name():
    assert (
        '"rope"' in (PACKAGE / "model" / "gpt.py").read_text()
    )  # the allowed default is really there
    assert "rope_randomized" in pe_names() and "alibi" in pe_names()
