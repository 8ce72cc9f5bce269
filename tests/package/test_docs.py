"""The repository stands alone: every citation of the paper points at a section of docs/paper.md.

Code, configs, docs and tests cite the paper's settings and numbers as "docs/paper.md 2.1.5",
"docs/paper.md section 1.3" or "docs/paper.md 3.1(a)" (part (a) of section 3.1). These tests check
that no file cites a document outside the repository instead, and that every cited number is a
numbered heading of docs/paper.md.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "docs" / "paper.md"
SCANNED = ["pods", "docs", "config", "workflows", "tests", "benchmarks", "scripts", "profiles",
           "README.md", "Snakefile"]
# Notes that once lived outside the repository; built from parts so that this file does not match
EXTERNAL = ["PAPER" + ".md", "CPU" + "-MINIATURE"]

NUMBER = r"\d+(?:\.\d+)*"
PART = r"(?:\s*\(([a-z])\))?"
CITATION = re.compile(
    rf"docs/paper\.md(?:\s+§\s*|\s+sections?\s+|\s+)({NUMBER}){PART}((?:\s*(?:,|/|and)\s*{NUMBER}{PART})*)")
HEADING = re.compile(rf"^#{{2,6}}\s+({NUMBER})\.?{PART}(?:\s|$)")


def scanned_files():
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            yield path
        elif path.is_dir():
            for file in sorted(path.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts and file.suffix not in (".pyc", ".png", ".pdf"):
                    yield file


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="ignore")


def headings() -> tuple[set[str], set[tuple[str, str]]]:
    numbers, parts = set(), set()
    in_code = False
    for line in read(PAPER).splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = None if in_code else HEADING.match(line)
        if match:
            numbers.add(match[1])
            if match[2]:
                parts.add((match[1], match[2]))
    return numbers, parts


def citations():
    for path in scanned_files():
        text = read(path)
        for match in CITATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            cited = [(match[1], match[2])]
            cited += [(m[1], m[2]) for m in re.finditer(rf"({NUMBER}){PART}", match[3])]
            for number, part in cited:
                yield f"{path.relative_to(ROOT)}:{line}", number, part


def test_no_file_cites_notes_outside_the_repository():
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in scanned_files()
                 for name in EXTERNAL if name in read(path)]
    assert not offenders, offenders


def test_the_paper_page_has_the_sections_the_citations_rely_on():
    numbers, parts = headings()
    for number in ["1", "1.1", "1.2", "1.3", "1.4", "2", "2.1", "2.2", "2.3", "3", "3.1", "3.2", "3.3",
                   "3.4", "4", "4.1", "4.7", *(f"2.1.{k}" for k in range(1, 9))]:
        assert number in numbers, number
    assert {("3.1", p) for p in "abcde"} <= parts


def test_every_citation_names_a_section_of_the_paper_page():
    numbers, parts = headings()
    found = list(citations())
    assert len(found) > 40  # the code, configs and tests do cite it
    missing = [(where, number, part) for where, number, part in found
               if number not in numbers or part and (number, part) not in parts]
    assert not missing, missing
    # a citation broken over two lines would escape the check above
    split = [f"{path.relative_to(ROOT)}" for path in scanned_files()
             if re.search(r"docs/paper\.md(?:\s+sections?)?[ \t]*\n[ \t]*(?:#|//|\*)?[ \t]*\d", read(path))]
    assert not split, split
