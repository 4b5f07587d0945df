"""The one registry type: strict about duplicates, helpful about unknown names, and discovery."""

from __future__ import annotations

import re
import sys

import pytest

from posexp.data import register_dataset, register_tokenizer
from posexp.data.synthetic import register_task
from posexp.errors import PosexpError
from posexp.objectives import register_objective
from posexp.pe import register_pe
from posexp.registry import Registry, discover


def test_add_get_and_the_mapping_view():
    reg: Registry[int] = Registry("widget")
    assert reg.add("b", 2) == 2
    assert reg.register("a")(1) == 1  # decorator form returns what it registers
    assert reg.get("a") == 1 and reg["b"] == 2
    assert reg.names() == ["b", "a"] and list(reg) == ["b", "a"] and sorted(reg) == ["a", "b"]
    assert dict(reg.items()) == {"b": 2, "a": 1} and list(reg.values()) == [2, 1]
    assert "a" in reg and "c" not in reg and len(reg) == 2


def test_a_name_registered_twice_is_refused_and_the_first_kept():
    reg: Registry[str] = Registry("widget")
    reg.add("a", "first")
    with pytest.raises(ValueError, match=r"^widget 'a' registered twice$"):
        reg.add("a", "second")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")("third")
    assert reg.get("a") == "first"


@pytest.mark.parametrize("name", ["", None, 3])
def test_names_must_be_non_empty_strings(name):
    with pytest.raises(ValueError, match="widget names must be non-empty strings"):
        Registry("widget").add(name, 1)


@pytest.mark.parametrize("name", ["c", None, 1])
def test_an_unknown_name_is_one_line_listing_the_registered_ones_sorted(name):
    reg: Registry[int] = Registry("widget")
    reg.add("b", 2)
    reg.add("a", 1)
    with pytest.raises(
        PosexpError, match=f"^{re.escape(f'unknown widget {name!r}; allowed: a, b')}$"
    ):
        reg.get(name)


def test_discover_imports_every_module_but_the_skipped_and_private(tmp_path, monkeypatch):
    pkg = tmp_path / "fakeparts"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text("REG = []\n")
    for name in ("alpha", "beta", "_private"):
        (pkg / f"{name}.py").write_text(
            f"import fakeparts.base\nfakeparts.base.REG.append({name!r})\n"
        )
    (pkg / "sub").mkdir()  # a subpackage is a module of the package too
    (pkg / "sub" / "__init__.py").write_text(
        "import fakeparts.base\nfakeparts.base.REG.append('sub')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import fakeparts

        discover("fakeparts", fakeparts.__path__, skip=("base",))
        base = sys.modules["fakeparts.base"]
        assert base.REG == ["alpha", "beta", "sub"]  # in name order; _private left alone
        assert "fakeparts._private" not in sys.modules
        discover("fakeparts", fakeparts.__path__)  # imported already: nothing registers twice
        assert base.REG == ["alpha", "beta", "sub"]
    finally:
        for mod in [m for m in sys.modules if m == "fakeparts" or m.startswith("fakeparts.")]:
            del sys.modules[mod]


def _again(register, name):
    return lambda: register(name)(type("Again", (), {"kind": "none"}))


@pytest.mark.parametrize(
    "register_again",
    [
        lambda: register_dataset("kjv", kind="lm")(lambda: None),
        _again(register_tokenizer, "byte"),
        _again(register_task, "copy"),
        _again(register_objective, "lm"),
        _again(register_pe, "rope"),
    ],
    ids=["dataset", "tokenizer", "task", "objective", "pe"],
)
def test_every_registry_of_the_project_refuses_a_second_registration(register_again):
    with pytest.raises(ValueError, match="registered twice"):
        register_again()
