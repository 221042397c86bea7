"""The layout rules of shared/design.md §10 and style.md that no linter checks: module size (no
module over 400 lines, and no `# fmt: skip` squeezing to get there), docstrings that cite tests which
exist, and the `acyclic` import contract's own proof that it can fail.

Every module of the product packages opens with a docstring that names at least one test (a file,
or `file::test_name`, where the name may end in `*`); every test a docstring or an `Invariant:`
paragraph names must exist. Reads files only; imports nothing of Nebula.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from functools import cache
from pathlib import Path

import grimp
import pytest

from tests.support import importcontracts

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kube", "vnode", "placement", "providers", "console", "nebula_site")
MAX_LINES = 400
# A `# fmt: skip` may keep a hand-aligned table (a literal's closing line), never a squeezed call.
TABLE_END = re.compile(r"[}\]]\s*$")
CITATION = re.compile(r"tests/[\w/.-]+?\.py(?:::[\w*\[\]-]+)?")


def _modules(packages: tuple[str, ...]) -> list[Path]:
    found = []
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                found.append(path)
    return found


@cache
def _test_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    )


def _missing(citation: str) -> str | None:
    """Why `citation` names nothing, or None when it names an existing test file (and test)."""
    file, _, name = citation.partition("::")
    path = ROOT / file
    if not path.is_file():
        return f"{file} does not exist"
    if name and not fnmatch.filter(_test_names(path), name.split("[")[0]):
        return f"{file} has no test {name}"
    return None


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def _invariant_paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if "Invariant" in p]


@pytest.mark.parametrize("path", _modules(PACKAGES), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_400_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("path", _modules(PACKAGES), ids=lambda p: str(p.relative_to(ROOT)))
def test_fmt_skip_only_keeps_an_aligned_table(path: Path) -> None:
    squeezed = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "# fmt: skip" in line and not TABLE_END.search(line.split("# fmt: skip")[0].rstrip().rstrip("#").rstrip())
    ]
    assert squeezed == []


@pytest.mark.parametrize("path", _modules(PACKAGES), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_test_a_module_cites_exists(path: Path) -> None:
    text = path.read_text()
    problems = [why for citation in CITATION.findall(text) if (why := _missing(citation))]
    assert problems == []


@pytest.mark.parametrize("path", _modules(PACKAGES), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_invariant_paragraph_names_a_test(path: Path) -> None:
    text = path.read_text()
    unnamed = [p.strip()[:80] for p in _invariant_paragraphs(text) if not CITATION.search(p)]
    assert unnamed == []


@pytest.mark.parametrize("path", _modules(PACKAGES), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_docstring_names_a_test(path: Path) -> None:
    assert CITATION.search(_docstring(path)), "the module docstring names no test (tests/...py)"


def test_the_citation_check_sees_a_missing_file_and_a_missing_test() -> None:
    assert _missing("tests/test_layout.py::test_no_module_is_over_400_lines") is None
    assert _missing("tests/test_layout.py::test_no_module_*") is None
    assert _missing("tests/test_layout.py::test_nothing_like_this") is not None
    assert _missing("tests/vnode/test_no_such_file.py") is not None


def test_no_import_circle_in_the_product() -> None:
    graph = grimp.build_graph(*PACKAGES, "devcluster", cache_dir=None)
    assert importcontracts.import_circles(graph, (*PACKAGES, "devcluster")) == []


def test_the_acyclic_contract_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.one", "a.two", "a.three", "b", "b.four"):
        graph.add_module(module)
    for importer, imported in (("a.one", "a.two"), ("a.two", "a.three"), ("a.three", "a.one"), ("b.four", "a.one")):
        graph.add_import(importer=importer, imported=imported)
    assert importcontracts.import_circles(graph, ("a", "b")) == [["a.one", "a.three", "a.two"]]
    graph.remove_import(importer="a.three", imported="a.one")
    assert importcontracts.import_circles(graph, ("a", "b")) == []
