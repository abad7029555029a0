"""The imports between `autograder/`'s modules and folders, read with `ast` (those inside
functions included), and what the layout forbids in them: a circle, or an import that runs back
up (a lower folder importing a higher one). `tests/test_layout.py` holds the layout to it.

    python3 tests/import_layout.py        # the figures: modules, folders, imports, circles, back up
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"

# The folders from the ground up: each may import those before it and never one after it.
# The modules at the top level beside them: `paths` below everything, `__main__` above.
LAYERS = ("paths", "trust", "engine", "units", "grading", "nbgrader", "release", "feedback", "tools",
          "tests", "__main__")


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    """'autograder.trust.sandbox' -> its file, for every module of the package."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def resolve(dotted: str) -> str | None:
        # the longest prefix that is a module of ours (a name imported from a module is not one)
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from . import student` imports the module student; `from .x import f` imports x
            targets = [f"{stem}.{alias.name}" for alias in node.names] + [stem]
            if any(resolve(f"{stem}.{alias.name}") == f"{stem}.{alias.name}" for alias in node.names):
                targets = targets[:-1]
        for target in targets:
            module = resolve(target)
            if module and module != name and module != "autograder":
                found.add(module)
    return found


def group_of(module: str) -> str:
    """The folder a module lies in, or the module's own name at the top level."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = module_names(package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one node (Tarjan's algorithm), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
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

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def folder_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    folders = defaultdict(set)
    for source, targets in edges.items():
        folders[group_of(source)]
        for target in targets:
            if group_of(target) != group_of(source):
                folders[group_of(source)].add(group_of(target))
    return dict(folders)


def back_up(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a folder to one above it in LAYERS (or to or from a folder not in LAYERS)."""
    rank = {name: at for at, name in enumerate(LAYERS)}
    wrong = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            a, b = group_of(source), group_of(target)
            if a != b and (a not in rank or b not in rank or rank[b] > rank[a]):
                wrong.append((source, target))
    return wrong


def figures(package: Path = PACKAGE) -> dict:
    edges = graph(package)
    folders = folder_graph(edges)
    top_level = [name for name in edges if name.count(".") == 1 and not (package / name.split(".")[1]).is_dir()]
    return {"modules": len(edges), "top_level_modules": len(top_level) + 1,  # + __init__.py
            "folders": sum(1 for name in folders if (package / name).is_dir()),
            "imports between modules": sum(len(t) for t in edges.values()),
            "imports between folders": sum(len(t) for t in folders.values()),
            "circles of modules": circles(edges), "circles of folders": circles(folders),
            "imports back up": back_up(edges)}


def main(argv: list[str]) -> int:
    package = Path(argv[0]).resolve() if argv else PACKAGE
    for key, value in figures(package).items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"    {' <-> '.join(item) if key.startswith('circles') else ' -> '.join(item)}")
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
