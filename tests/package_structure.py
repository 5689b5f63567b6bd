"""The package's structure, read from its import statements (at any depth, relative ones
resolved; nothing is imported): its parts (top-level packages and loose modules), the imports
between them, the floors they stand on and the imports that tie parts or modules in a circle.

`python tests/package_structure.py` prints the figures; tests/test_layering.py holds them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "mmspec"


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for the package whose folder is `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts).removesuffix(".__init__")] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (`from a import b`: a.b when that is a module,
    else a)."""
    modules = module_files(root)
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def part_of(module: str, package: str) -> str:
    """The top-level part a module belongs to: `mmspec.data.hf` -> `data`; the package's own
    `__init__` is the part `__init__`."""
    rest = module.removeprefix(package).lstrip(".")
    return rest.split(".")[0] or "__init__"


def part_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """Part -> the other parts its modules import."""
    parts: dict[str, set[str]] = {}
    for importer, imported in graph.items():
        mine = part_of(importer, package)
        parts.setdefault(mine, set()).update(
            part_of(m, package) for m in imported if part_of(m, package) != mine
        )
    return parts


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm), each
    sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Node -> its floor: 1 for a node that imports nothing, else one above the highest node it
    imports; the nodes of one circle share a floor."""
    together = {node: tuple(c) for c in circles(graph) for node in c}
    floor: dict[str, int] = {}

    def of(node: str) -> int:
        if node not in floor:
            group = together.get(node, (node,))
            for member in group:
                floor[member] = 0  # a circle's members are being measured
            below = {m for g in group for m in graph.get(g, ()) if m not in group}
            height = 1 + max((of(m) for m in below), default=0)
            for member in group:
                floor[member] = height
        return floor[node]

    for node in sorted(graph):
        of(node)
    return floor


def back_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports that tie two nodes of one circle: with them the nodes cannot stand on
    floors."""
    together = {node: i for i, c in enumerate(circles(graph)) for node in c}
    return sorted(
        (a, b)
        for a, imported in graph.items()
        for b in imported
        if a in together and together[a] == together.get(b)
    )


def structure(root: Path = PACKAGE) -> dict[str, object]:
    """The figures of the package at `root`."""
    graph = import_graph(root)
    parts = part_graph(graph, root.name)
    packages = sorted(p for p in parts if (root / p).is_dir())
    loose = sorted(p for p in parts if p not in packages and p != "__init__")
    return {
        "packages": packages,
        "loose modules": loose,
        "parts": len(packages) + len(loose),
        "floors of the parts": max(floors(parts).values()),
        "imports between parts": sum(len(v) for v in parts.values()),
        "modules": len(graph),
        "imports between modules": sum(len(v) for v in graph.values()),
        "parts in a circle": circles(parts),
        "imports that run back up between parts": back_up(parts),
        "module circles": circles(graph),
    }


def main() -> None:
    for key, value in structure().items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"  {' -> '.join(item) if isinstance(item, tuple) else item}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
