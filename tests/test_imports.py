"""The package's import graph: no cycles, and every layer imports only the layers below it (issue 26).

Imports inside functions count (they are cycles deferred, not removed); imports under
``if TYPE_CHECKING:`` do not (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "symbolic"
# Lowest first: a module may import its own layer and the layers before it, never one after.
LAYERS = ("core", "formats", "text", "math", "library", "networks", "options", "catalogs", "planning", "engines", "measured",
          "report", "cli")


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


class _Imports(ast.NodeVisitor):
    """The symbolic modules one module imports, wherever the import statement is (not TYPE_CHECKING)."""

    def __init__(self, name: str, is_package: bool, known: set[str]) -> None:
        self.base = name.split(".") if is_package else name.split(".")[:-1]
        self.known, self.found = known, set()

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(self._known(alias.name) for alias in node.names if alias.name.startswith("symbolic"))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            prefix = ".".join(self.base[:len(self.base) - node.level + 1] + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        if prefix.startswith("symbolic"):
            self.found.update(self._known(f"{prefix}.{alias.name}") for alias in node.names)

    def _known(self, name: str) -> str:
        while name not in self.known and "." in name:
            name = name.rsplit(".", 1)[0]
        return name


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py", set(modules))
        visitor.visit(ast.parse(path.read_text(), str(path)))
        graph[name] = visitor.found - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else None


def test_every_module_sits_in_a_layer() -> None:
    loose = sorted(m for m in _modules() if m.count(".") == 1 and m.split(".")[1] not in (*LAYERS, "__main__")
                   and not (PACKAGE / m.split(".")[1]).is_dir())
    assert loose == [], "modules at the package root belong in a layer's folder"
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders <= set(LAYERS), folders - set(LAYERS)


def test_no_layer_imports_a_layer_above_it() -> None:
    upward = []
    for module, imported in _graph().items():
        mine = _layer(module)
        for other in imported:
            theirs = _layer(other)
            if mine and theirs and LAYERS.index(theirs) > LAYERS.index(mine):
                upward.append(f"{module} -> {other}")
    assert upward == []
