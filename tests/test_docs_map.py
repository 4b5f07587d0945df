"""The docs' map of the package, checked against the tree so it cannot drift: every package and
module that docs/extending.md's "Where things are" names exists, every package is named, and
every ``posexp/...`` path or ``posexp.x.y`` name a docs page gives exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "posexp"
EXTENDING = ROOT / "docs" / "extending.md"
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
# The worked examples of a new part: modules a reader would add, which posexp does not ship.
EXAMPLES = {
    "posexp/pe/linear_bias.py",
    "posexp/extension/methods/power_base.py",
    "posexp/data/synthetic/duplicate.py",
    "posexp/scoring/top1.py",
}
MODULE = re.compile(r"(?<![\w/.])(\w+\.py)\b")


def map_lines() -> list[str]:
    """The lines of the map's text block."""
    section = EXTENDING.read_text().split("## Where things are", 1)[1]
    return section.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()


def read_map(lines: list[str]) -> tuple[set[Path], set[Path]]:
    """(packages, modules) a map names. A line at the margin starts with ``posexp/<package>/`` or
    ``posexp/<module>.py``; a line indented two spaces with ``<subpackage>/`` (below the last
    package at the margin); deeper lines continue the line above. Every ``<name>.py`` on a line
    is a module of that line's package."""
    packages: set[Path] = set()
    modules: set[Path] = set()
    top = here = ROOT
    for line in lines:
        first = line.split()[0] if line.strip() else ""
        if line.startswith("posexp/"):
            top = here = ROOT / first if first.endswith("/") else (ROOT / first).parent
            if first.endswith("/"):
                packages.add(here)
            else:
                modules.add(ROOT / first)
            line = line.replace(first, "", 1)
        elif line.startswith("  ") and not line.startswith("   ") and first.endswith("/"):
            here = top / first
            packages.add(here)
        modules |= {here / name for name in MODULE.findall(line)}
    return packages, modules


def test_the_reader_sees_what_a_map_names():
    lines = [
        "posexp/cli/       the command line: app.py, help.py",
        "  sub/            inside it: one.py",
        "                  and two.py",
        "posexp/errors.py registry.py",
    ]
    packages, modules = read_map(lines)
    assert packages == {PACKAGE / "cli", PACKAGE / "cli" / "sub"}
    assert modules == {
        PACKAGE / "cli" / "app.py",
        PACKAGE / "cli" / "help.py",
        PACKAGE / "cli" / "sub" / "one.py",
        PACKAGE / "cli" / "sub" / "two.py",
        PACKAGE / "errors.py",
        PACKAGE / "registry.py",
    }


def test_every_package_and_module_on_the_map_exists():
    packages, modules = read_map(map_lines())
    assert len(packages) > 10 and len(modules) > 50  # the map was read, not skipped
    missing = sorted(
        str(p.relative_to(ROOT)) for p in packages if not (p / "__init__.py").is_file()
    )
    missing += sorted(str(m.relative_to(ROOT)) for m in modules if not m.is_file())
    assert missing == []


def test_every_package_and_top_level_module_is_on_the_map():
    packages, modules = read_map(map_lines())
    tree = {p.parent for p in PACKAGE.rglob("__init__.py")} - {PACKAGE}
    assert sorted(str(p.relative_to(ROOT)) for p in tree - packages) == []
    loose = set(PACKAGE.glob("*.py")) - {PACKAGE / "__init__.py"}
    assert sorted(str(m.relative_to(ROOT)) for m in loose - modules) == []


def named_paths(text: str) -> set[str]:
    """Every ``posexp/...`` path a page gives (``posexp/store/rundir.py``, ``posexp/pe/``)."""
    return {m.rstrip("/.") for m in re.findall(r"(?<![\w/.-])posexp/[\w/.]*\w", text)}


def named_objects(text: str) -> set[str]:
    """Every dotted name a page gives (``posexp.store.rundir``, ``posexp.checks.user_path``)."""
    return set(re.findall(r"(?<![\w/.])posexp(?:\.\w+)+", text))


def resolves(name: str) -> bool:
    """Whether a dotted name is a module of posexp, or an attribute of one."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_readers_of_the_pages_find_paths_and_names():
    text = "see `posexp/store/rundir.py`, posexp/pe/ and `posexp.checks.user_path`."
    assert named_paths(text) == {"posexp/store/rundir.py", "posexp/pe"}
    assert named_objects(text) == {"posexp.checks.user_path"}
    assert resolves("posexp.checks.user_path") and resolves("posexp.store")
    assert not resolves("posexp.rundir") and not resolves("posexp.checks.no_such_check")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_name_a_page_gives_exists(page):
    text = page.read_text()
    gone = sorted(
        p
        for p in named_paths(text) - EXAMPLES
        if not (ROOT / p).exists() and not (ROOT / f"{p}.py").exists()
    )
    gone += sorted(n for n in named_objects(text) if not resolves(n))
    assert gone == []
