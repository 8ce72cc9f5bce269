"""The package's import graph against docs/architecture.md: no cycles (function-level imports
included), the core imports nothing else of the package, the training side never imports the study
side or the authors'-data side, and neither of those imports a training engine. The rooms are read
from the document, so it cannot drift, and each module's room is the one its subpackage names."""
from __future__ import annotations

import textwrap

from import_graph import PACKAGE_ROOMS, REPO, ROOMS_DOC, cycles, import_graph, room_of, rooms, violations

# --- the package ---------------------------------------------------------------------------------
GRAPH = import_graph(REPO / "pods")
PLACED = rooms(ROOMS_DOC.read_text())


def test_every_module_has_a_room_in_the_architecture_document():
    unplaced = [m for m in GRAPH if m != "pods" and room_of(m, PLACED) is None]
    assert unplaced == [], f"add a line for each to {ROOMS_DOC.relative_to(REPO)}"
    assert set(PLACED) <= set(GRAPH), "the document lists a module the package does not have"


def test_each_subpackage_holds_its_room_only():
    def expected(module):
        top = ".".join(module.split(".")[:2])
        return PACKAGE_ROOMS.get(top, {"core", "shared"})
    misplaced = [f"{m}: {room_of(m, PLACED)}" for m in GRAPH if room_of(m, PLACED) not in expected(m)]
    assert misplaced == []


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_imports_run_one_way_between_the_rooms():
    assert violations(GRAPH, PLACED) == []


def test_the_vocabulary_is_a_leaf():
    """pods.vocabulary is what every side speaks: it imports nothing of the package, so no side
    depends on another to spell a run path, a method name, a design or a step phase."""
    assert GRAPH["pods.vocabulary"] == set()


def test_the_shared_modules_import_no_room():
    assert [f"{m} imports {t}" for m in GRAPH if room_of(m, PLACED) == "shared"
            for t in sorted(GRAPH[m] - {"pods"}) if room_of(t, PLACED) != "shared"] == []


def test_the_graph_sees_lazy_imports_and_the_checks_find_what_they_look_for(tmp_path):
    package = tmp_path / "toy"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from toy import b\n",
        "b.py": "def later():\n    from toy.sub import c\n",  # a function-level import
        "sub/__init__.py": "from .c import thing\n",  # relative
        "sub/c.py": "import toy.a\nthing = 1\n",
        "d.py": "from toy.sub.c import thing\n",
    }
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text))
    graph = import_graph(package)
    assert graph["toy.b"] == {"toy.sub", "toy.sub.c"} and graph["toy.sub"] == {"toy.sub.c"}
    assert graph["toy.d"] == {"toy.sub", "toy.sub.c"}  # its own package `toy` is running already
    assert cycles(graph) == [["toy.a", "toy.b", "toy.sub", "toy.sub.c"]]
    placed = rooms("## Training\nEngines:\n- `toy.a`: x\n## Study\n- `toy.b`: y\n"
                   "## Shared by every side\n- `toy.sub`: z\n")
    assert room_of("toy.sub.c", placed) == "shared"
    assert violations(graph, placed, package="toy") == [
        "toy.a (training engine) imports toy.b (study)",
        "toy.d (None) imports toy.sub (shared)",
        "toy.d (None) imports toy.sub.c (shared)",
        "toy.sub.c (shared) imports toy.a (training engine)",
    ]


def test_the_study_and_authors_sides_read_runs_without_torch():
    """Reading runs, checking a study file's rows and drawing are pure data work: `pods analyze`,
    `pods plot` and `pods paper` start without torch (seconds of import on every call)."""
    import subprocess
    import sys

    code = textwrap.dedent("""
        import sys
        from pods.study import analysis, calibration, plots, stats, verdict, views  # noqa: F401
        from pods.paper import cli, figures, importer, release  # noqa: F401
        analysis.validate_comparison({"benchmark": "arith", "hardware": "cpu", "design": "equal_update",
                                      "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4"})
        assert "torch" not in sys.modules, "the study side imported torch"
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
