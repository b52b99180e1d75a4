"""The package's imports point one way, down the pipeline: every import of every module
(function-local ones included; imports for type checkers only are not run and not counted)
goes to a module of the same layer or a lower one, and no modules import each other round a
cycle. The layers, lowest first, are the README's file map."""

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "simulator"

LAYERS = (
    ("foundation", ("errors", "units", "version", "gc_pause", "workers")),
    ("vocabulary", ("ops", "config.strict")),  # what a file may say
    ("config", ("config",)),  # files → frozen dataclasses
    ("graph", ("graph",)),  # the validated dataflow graph
    ("cost", ("cost",)),  # every timing rule, once
    ("schedule", ("schedule",)),  # fusion, tiling, lowering → Program
    ("engine", ("engine",)),  # Program → Trace (SimPy)
    ("analysis", ("analysis",)),  # Trace → report record, roofline
    ("viz", ("viz",)),  # renderings of a report
    ("pipeline", ("report", "pipeline", "step_cache", "examples")),  # one run, cached
    ("studies", ("studies",)),  # many runs: compare, sweep, tune, infer, serve
    (
        "interface",
        ("", "cli", "cli_args", "cli_options", "cli_infer", "cli_serve", "__main__"),
    ),  # the package's API and the CLI
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"simulator.{module} is in no layer: add it to LAYERS"
    return best[0]


class Imports(ast.NodeVisitor):
    """The package modules a module imports, at any depth, except under `if TYPE_CHECKING:`."""

    def __init__(self, module: str, is_package: bool, known: set[str], typing_too=False):
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        self.known, self.found = known, set()
        self.typing_too = typing_too  # count imports under `if TYPE_CHECKING:` too

    def visit_If(self, node: ast.If) -> None:
        if (
            isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
            and not self.typing_too
        ):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[: len(self.package) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        elif (node.module or "").startswith("simulator"):
            target = node.module.removeprefix("simulator").lstrip(".")
        else:
            return
        self._add(target)
        for alias in node.names:
            self._add(f"{target}.{alias.name}".lstrip("."))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.startswith("simulator"):
                self._add(alias.name.removeprefix("simulator").lstrip("."))

    def _add(self, target: str) -> None:
        if target in self.known:
            self.found.add(target)


def import_graph(typing_too: bool = False) -> nx.DiGraph:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    for module, path in files.items():
        graph.add_node(module)
        visitor = Imports(module, path.name == "__init__.py", set(files), typing_too)
        visitor.visit(ast.parse(path.read_text()))
        graph.add_edges_from((module, target) for target in visitor.found - {module})
    return graph


def test_no_module_imports_up_the_pipeline():
    upward = [
        f"simulator.{a or '__init__'} ({LAYERS[layer_of(a)][0]}) imports simulator."
        f"{b} ({LAYERS[layer_of(b)][0]})"
        for a, b in import_graph().edges
        if layer_of(b) > layer_of(a)
    ]
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def test_no_modules_import_each_other_round_a_cycle():
    """Module by module, inside a package as across packages, and counting imports for the
    type checker: two modules that need each other's names are one module or want a third."""
    cycles = [c for c in nx.simple_cycles(import_graph(typing_too=True))]
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_check_sees_a_cycle_inside_a_package(tmp_path):
    """Issue 21, class 14: engine.transfer and engine.world once imported each other, the one
    for its type checker only, and the check did not see it."""
    graph = nx.DiGraph()
    for module, text in {
        "engine.world": "from .transfer import T\n",
        "engine.transfer": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from .world import World\n",
    }.items():
        visitor = Imports(module, False, {"engine.world", "engine.transfer"}, typing_too=True)
        visitor.visit(ast.parse(text))
        graph.add_edges_from((module, target) for target in visitor.found)
    assert list(nx.simple_cycles(graph))


def test_the_check_sees_function_local_imports():
    """A function-local import counts (it is how the old cycles hid)."""
    visitor = Imports("engine.world", False, {"viz.plots"})
    visitor.visit(ast.parse("def f():\n    from ..viz.plots import plot\n"))
    assert visitor.found == {"viz.plots"}
