"""The test suite's layout: a folder per room, and no test module imports another.

tests/core, tests/training, tests/study and tests/paper test one room each (docs/architecture.md):
a test module there imports the package only from its room and the rooms that room may import.
tests/shared tests what the rooms share (the run files, the registries), tests/workflow the
Snakemake workflow over all of them, tests/package the repository as a whole (docs, install,
imports, this layout). Shared fixtures live in conftest.py and shared helpers in helper modules
(helpers.py, tiny_models.py, hub_cache.py, import_graph.py): what a test needs from another room
(a tiny model to train in tests/core, say) comes through them. Importing a test module from
another runs its module-level setup and ties one module's subject to the other's code; the scripts
that tests write out and run in a child process, with tests/ on their path, are held to the same
rule.
"""
from __future__ import annotations

import ast
from pathlib import Path

from import_graph import ALLOWED, PLACED_ROOMS, room_of

TESTS = Path(__file__).resolve().parents[1]  # the tests folder (helpers.py, conftest.py)
TEST_MODULES = {path.stem for path in TESTS.rglob("test_*.py")}
# the folders of one room each, and the rooms of docs/architecture.md they test
FOLDER_ROOMS = {"core": ("core",), "training": ("training engine", "training specification"),
                "study": ("study",), "paper": ("authors' data",)}
# the folders that test across the rooms
CROSSING_FOLDERS = ("shared", "workflow", "package")


def imported_modules(tree: ast.AST) -> set[str]:
    """Every module `tree` imports, itself or in a script it holds as a string."""
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            # `from tests import test_x` names the module after `import`
            modules |= {node.module or ""} | {f"{node.module or ''}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for line in node.value.splitlines():
                if line.strip().startswith(("import ", "from ")):
                    try:
                        modules |= imported_modules(ast.parse(line.strip()))
                    except SyntaxError:  # prose that begins with the word
                        pass
    return modules


def imported_test_modules(source: str) -> set[str]:
    return {part for name in imported_modules(ast.parse(source)) for part in name.split(".") if part in TEST_MODULES}


def test_the_detector_finds_every_form_of_import():
    forms = ["import test_trainer", "from test_trainer import FirstDigit", "from tests.test_trainer import FirstDigit",
             "from tests import test_trainer", "import os, test_trainer as t",
             'SCRIPT = """\nimport sys\nfrom test_trainer import FirstDigit\n"""',
             'SCRIPT = f"""\nimport pods, test_trainer\n{1}"""']
    for source in forms:
        assert imported_test_modules(source), source
    assert not imported_test_modules("import helpers\nfrom tiny_models import tiny_lm\nimport hub_cache\n"
                                     'SCRIPT = """\nfrom helpers import FirstDigit\n"""')


def test_no_test_module_imports_another():
    found = {path.name: sorted(imported_test_modules(path.read_text()))
             for path in sorted(TESTS.rglob("*.py")) if path.name != "test_layout.py"}  # its examples above
    assert {name: modules for name, modules in found.items() if modules} == {}


def test_every_test_module_sits_in_a_room_folder():
    loose = [p.name for p in TESTS.glob("test_*.py")]
    unknown = [p.parent.name for p in TESTS.glob("*/test_*.py")
               if p.parent.name not in (*FOLDER_ROOMS, *CROSSING_FOLDERS)]
    assert loose == [] and unknown == []


def package_imports(source: str) -> set[str]:
    """The package modules a test module imports itself (scripts it runs in a child are not its subject)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "pods"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pods":
            found |= {f"{node.module}.{a.name}" if node.module in ("pods", "pods.training", "pods.study", "pods.paper")
                      else node.module for a in node.names}
    return found


def test_each_room_folder_imports_its_room_only():
    wrong = []
    for folder, tested in FOLDER_ROOMS.items():
        allowed = set().union(*(ALLOWED[room] for room in tested))
        for path in sorted((TESTS / folder).glob("test_*.py")):
            for module in sorted(package_imports(path.read_text())):
                if room_of(module, PLACED_ROOMS) not in allowed:
                    wrong.append(f"{folder}/{path.name} imports {module} ({room_of(module, PLACED_ROOMS)})")
    assert wrong == []


def test_the_room_check_sees_a_module_from_another_room():
    assert package_imports("from pods.study import analysis\nimport pods.training.trainer\n"
                           "from pods.runs import read_run\nSCRIPT = 'import pods.paper'\n") == {
        "pods.study.analysis", "pods.training.trainer", "pods.runs"}
    assert room_of("pods.study.analysis", PLACED_ROOMS) not in ALLOWED["core"]
