"""The package's architecture, read from the source (nothing is imported): no import cycle,
dependencies that point one way, and modules that each state their one job."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "posexp"
# Not a rule of style but a smell detector: a module this long is almost surely doing two jobs.
# What a module holds is decided by its job (its docstring), never by staying under a count.
SMELL_LINES = 800


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def resolve(name: str) -> str | None:
    """The posexp module an import names (``posexp.pe.get_pe`` -> ``posexp.pe``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """Every posexp module ``module`` imports, at any depth of its code (lazy imports too)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        for name in names:
            target = resolve(name) if name.split(".")[0] == "posexp" else None
            # A module importing its own package (to reach a sibling) is not a dependency on itself.
            if target and target != module and not module.startswith(target + "."):
                found.add(target)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_the_reader_sees_the_real_graph():
    # The reader must find lazy imports too, or the cycle test below could pass by blindness.
    assert "posexp.commands.train" in GRAPH["posexp.commands.hydra_tasks"]  # inside a function
    assert "posexp.pe" in GRAPH["posexp.model.gpt"]


def test_no_import_cycle_inside_posexp():
    assert cycles() == []


# Layers from the bottom up: a module may import its own layer and those below, never above.
LOWER_MUST_NOT_IMPORT = {
    "posexp.extension": ("posexp.pe", "posexp.model", "posexp.data", "posexp.config"),
    "posexp.pe": ("posexp.model", "posexp.data", "posexp.config"),
    "posexp.data": ("posexp.model", "posexp.pe", "posexp.extension", "posexp.objectives"),
    # The model runs on the kernels it is handed; the run chooses them (posexp.runtime).
    "posexp.model": (
        "posexp.config",
        "posexp.data",
        "posexp.store",
        "posexp.runtime",
        "hydra",
        "omegaconf",
    ),
    "posexp.kernels": ("posexp.model", "posexp.pe", "posexp.runtime", "posexp.config"),
    "posexp.objectives": ("posexp.commands", "posexp.cli"),
    "posexp.runtime": ("posexp.commands", "posexp.cli"),
    # Storage keeps run dirs durable for every command; it knows nothing of what they compute.
    "posexp.store": (
        "posexp.commands",
        "posexp.cli",
        "posexp.model",
        "posexp.pe",
        "posexp.extension",
        "posexp.data",
        "posexp.objectives",
        "posexp.scoring",
        "posexp.kernels",
    ),
}
ABOVE_ALL = ("posexp.commands", "posexp.cli")


@pytest.mark.parametrize("layer", sorted(LOWER_MUST_NOT_IMPORT))
def test_dependencies_point_one_way(layer):
    forbidden = (*LOWER_MUST_NOT_IMPORT[layer], *ABOVE_ALL)
    bad = sorted(
        f"{m} -> {t}"
        for m in GRAPH
        if m == layer or m.startswith(layer + ".")
        for t in GRAPH[m]
        if t.startswith(forbidden)
    )
    assert bad == []


def test_the_model_knows_nothing_of_hydra_the_cli_or_tensorboard():
    model = [p for m, p in MODULES.items() if m == "posexp.model" or m.startswith("posexp.model.")]
    assert len(model) > 1  # the package and its modules
    for path in model:
        source = path.read_text()
        for word in ("hydra", "omegaconf", "typer", "tensorboard", "SummaryWriter"):
            assert f"import {word}" not in source and f"from {word}" not in source, path


def test_every_module_states_its_job():
    # The docstring opens with the module's one job; a module that cannot say it in a sentence or
    # two is a candidate for splitting, whatever its length.
    missing = sorted(
        m for m, p in MODULES.items() if len(ast.get_docstring(ast.parse(p.read_text())) or "") < 20
    )
    assert missing == []


def test_no_module_is_long_enough_to_smell():
    long = {
        m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > SMELL_LINES
    }
    assert long == {}


def test_the_layers_exist():
    # A layer renamed away would make its rule above pass by checking nothing.
    for layer in LOWER_MUST_NOT_IMPORT:
        assert sum(m == layer or m.startswith(layer + ".") for m in MODULES) > 1, layer


def test_scripts_and_tests_import_normally_without_editing_the_import_path():
    root = PACKAGE.parent
    edit = "sys." + "path"  # spelt apart so this file does not match itself
    found = sorted(
        str(p.relative_to(root))
        for folder in ("scripts", "tests")
        for p in (root / folder).rglob("*.py")
        if edit in p.read_text()
    )
    assert found == []


def test_the_report_draws_through_the_results_library_not_eval_extrapolate():
    # One plotting module for curves by length (posexp.results.curves): the report may start
    # evaluations (plan, evaluate), but never borrows eval-extrapolate's outputs' helpers.
    borrowed = sorted(
        f"{m} -> {t}"
        for m in GRAPH
        if m.startswith("posexp.commands.report")
        for t in GRAPH[m]
        if t.startswith("posexp.commands.extrapolate")
        and t not in ("posexp.commands.extrapolate.plan", "posexp.commands.extrapolate.evaluate")
    )
    assert borrowed == []
    plotting = [m for m in MODULES if m.endswith(("plots", "extrapolation_plot"))]
    assert plotting == ["posexp.commands.report.views.extrapolation_plot"]  # glue over curves
    assert "posexp.results.curves" in GRAPH["posexp.commands.report.views.extrapolation_plot"]
    glue = MODULES["posexp.commands.report.views.extrapolation_plot"].read_text()
    assert "matplotlib" not in glue  # it builds the curves; results.curves draws them
    # the length-generalization and RULER figures too: their views build curves, never draw
    for view in ("tasks_plot", "ruler"):
        source = MODULES[f"posexp.commands.report.views.{view}"].read_text()
        assert "posexp.results.curves" in GRAPH[f"posexp.commands.report.views.{view}"]
        assert not any(f".{draw}(" in source for draw in ("plot", "errorbar", "axvspan"))
