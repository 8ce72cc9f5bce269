"""The README a newcomer reads first: short, the answer and the two commands on its first screen,
every command in it run by a test (named here, so a new command without one fails), its Python
example executed as printed, and every link pointing at a file of the repository."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIRST_SCREEN = 70  # lines a reader sees before scrolling far

# each shell command of the README -> the test that runs it (file, test function)
RUN_BY = {
    'pip install "torch==2.13.0" -e ".[dev]" && snakemake --cores all reproduce':
        ("tests/workflow/test_workflow.py", "test_a_fresh_clone_regenerates_nothing_and_leaves_git_status_clean"),
    "pytest": (".ci/run", None),  # CI's pytest stage runs exactly this command's test set
    "pods train max_steps=20":
        ("tests/training/test_quick_run.py", "test_the_quick_run_from_a_fresh_folder_end_to_end"),
}


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def commands() -> list[str]:
    out = []
    for block in fenced("bash"):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line:
                out.append(line)
    return out


def test_the_readme_is_short_and_puts_the_answer_and_the_commands_first():
    lines = README.read_text().splitlines()
    assert 100 <= len(lines) <= 200, len(lines)
    first = "\n".join(lines[:FIRST_SCREEN])
    for heading in ("## The answer so far", "## The two commands", "## One quick run"):
        assert heading in first, heading
    assert all(command in first for command in RUN_BY)


def test_every_readme_command_is_run_by_a_named_test():
    found = commands()
    assert found and set(found) == set(RUN_BY), set(found) ^ set(RUN_BY)
    for command, (path, test) in RUN_BY.items():
        text = (ROOT / path).read_text()
        if test is None:
            assert re.search(r"\bpytest\b", text), path
        else:
            assert f"def {test}(" in text, (command, path, test)


def test_the_readme_python_example_runs_as_printed():
    blocks = fenced("python")
    assert blocks
    for block in blocks:
        scope: dict = {}
        exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
    assert scope["kept"].shape == (1, 4) and scope["advantages"].shape == (1, 4)


def test_every_readme_link_points_at_a_file_of_the_repository():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_the_glossary_defines_the_words_the_readme_uses_before_explaining_them():
    glossary = (ROOT / "docs/glossary.md").read_text()
    for word in ("design", "GRPO-GA", "cost clock", "gain profile", "look", "boundary", "Holm",
                 "exploratory", "protocol", "seed pair"):
        assert f"| {word}" in glossary or f"| `{word}`" in glossary, word
