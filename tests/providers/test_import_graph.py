"""The providers package imports without a circle: every arrow between its modules goes one way."""

from __future__ import annotations

import grimp


def _circles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected groups of more than one module under `package` (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if not other.startswith(package):
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):
        if module.startswith(package) and module not in index:
            visit(module)
    return found


def test_providers_have_no_import_circle() -> None:
    """`providers.base` imports `providers.streams`, never the other way (also under TYPE_CHECKING)."""
    graph = grimp.build_graph("providers")
    assert _circles(graph, "providers") == []
    assert not graph.direct_import_exists(importer="providers.streams", imported="providers.base")
