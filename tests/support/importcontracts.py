"""An import-linter contract type that import-linter lacks: `acyclic`, no import circle among the
modules of the given packages (shared/design.md §10). Registered in pyproject.toml's
`[tool.importlinter] contract_types`; `lint-imports` (run by `make test`) checks it, and
tests/test_layout.py::test_the_acyclic_contract_finds_a_circle proves it can fail.
"""

from __future__ import annotations

from collections.abc import Iterable

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def import_circles(graph: grimp.ImportGraph, packages: Iterable[str]) -> list[list[str]]:
    """Every strongly connected set of two or more modules under `packages` (Tarjan's algorithm,
    iterative), each sorted; TYPE_CHECKING imports count: a circle for the reader is a circle."""
    roots = tuple(packages)
    inside = sorted(m for m in graph.modules if m.split(".")[0] in roots)
    edges = {
        m: sorted(n for n in graph.find_modules_directly_imported_by(m) if n.split(".")[0] in roots) for m in inside
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in inside:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    circles.append(sorted(members))
    return sorted(circles)


class AcyclicContract(Contract):
    """No module of `packages` reaches itself through imports."""

    type_name = "acyclic"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        circles = import_circles(graph, self.packages)  # type: ignore[arg-type]
        return ContractCheck(kept=not circles, warnings=None, metadata={"circles": circles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for circle in check.metadata["circles"]:
            output.print_error(f"import circle: {' <-> '.join(circle)}")
            output.new_line()
