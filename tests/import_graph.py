"""The package's import graph and the rooms of docs/architecture.md, for the tests that check them
(tests/package/test_imports.py: the package; tests/package/test_layout.py: the test folders)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOMS_DOC = REPO / "docs" / "architecture.md"


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package under `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its body (a lazy import inside a
    function counts: it runs, later). `from pkg import name` counts as importing `pkg.name` when
    that is a module, and every package above it (their `__init__`s run) either way."""
    known, package = modules(root), root.name
    graph = {}
    for name, path in known.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package `level - 1` steps above this one
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        edges, ancestors = set(), {".".join(name.split(".")[:k]) for k in range(1, name.count(".") + 1)}
        for target in targets:
            if target.split(".")[0] != package:
                continue
            while target not in known:  # `pods.x.name` where `name` is not a module: `pods.x`
                target = target.rpartition(".")[0]
            # importing `pods.x.y` runs `pods.x` first, except where it is this module's own package
            # (already initialised by the time this module runs)
            parts = target.split(".")
            edges |= {".".join(parts[:k]) for k in range(1, len(parts) + 1)} - ancestors - {name}
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), as a sorted list."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def rooms(doc: str) -> dict[str, str]:
    """Documented module -> its room: `core`, `training engine`, `training specification`, `study`,
    `authors' data` or `shared`, from the headings and lists of docs/architecture.md."""
    placed, room = {}, None
    for line in doc.splitlines():
        if line.startswith("## "):
            room = {"Core": "core", "Training": "training", "Study": "study", "Authors' data": "authors' data",
                    "Shared by every side": "shared"}.get(line[3:].strip())
        elif room and line.startswith("Engines"):
            room = "training engine"
        elif room and line.startswith("Specifications"):
            room = "training specification"
        elif room and (match := re.match(r"- `(\w+(?:\.\w+)*)`", line)):
            placed[match.group(1)] = room
    return placed


def room_of(module: str, placed: dict[str, str]) -> str | None:
    while module and module not in placed:  # `pods.training.rollout.hf` lives where `pods.training.rollout` does
        module = module.rpartition(".")[0]
    return placed.get(module)


# Which room may import which (the package's own `__init__` is importable from everywhere).
ALLOWED = {
    "core": {"core"},
    "training engine": {"training engine", "training specification", "core", "shared"},
    "training specification": {"training specification", "core", "shared"},  # a run's spec loads no engine
    "study": {"study", "training specification", "core", "shared"},
    "authors' data": {"authors' data", "study", "training specification", "core", "shared"},
    "shared": {"shared", "core"},  # the vocabulary every side speaks depends on no side
}
# The rooms each subpackage holds (a top-level module is core or shared).
PACKAGE_ROOMS = {
    "pods.training": {"training engine", "training specification"},
    "pods.study": {"study"},
    "pods.paper": {"authors' data"},
    "pods.integrations": {"core"},
}


def violations(graph: dict[str, set[str]], placed: dict[str, str], package: str = "pods") -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets - {package}):
            source_room, target_room = room_of(module, placed), room_of(target, placed)
            if target_room not in ALLOWED.get(source_room, set()):
                found.append(f"{module} ({source_room}) imports {target} ({target_room})")
    return found


# the rooms of the package's modules as the document places them
PLACED_ROOMS = rooms(ROOMS_DOC.read_text())
