"""The test suite's layout: no test module imports another.

Shared fixtures live in conftest.py and shared helpers in helper modules (helpers.py,
tiny_models.py, hub_cache.py). Importing a test module from another runs its module-level setup
and ties one module's subject to the other's code; the scripts that tests write out and run in a
child process, with tests/ on their path, are held to the same rule.
"""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
TEST_MODULES = {path.stem for path in TESTS.glob("test_*.py")}


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
             for path in sorted(TESTS.glob("*.py")) if path.name != "test_layout.py"}  # its examples above
    assert {name: modules for name, modules in found.items() if modules} == {}
