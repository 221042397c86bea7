"""The providers package imports without a circle: every arrow between its modules goes one way
(the product-wide check is tests/test_layout.py::test_no_import_circle_in_the_product)."""

from __future__ import annotations

import grimp

from tests.support import importcontracts


def test_providers_have_no_import_circle() -> None:
    """`providers.base` imports `providers.streams`, never the other way (also under TYPE_CHECKING)."""
    graph = grimp.build_graph("providers", cache_dir=None)
    assert importcontracts.import_circles(graph, ("providers",)) == []
    assert not graph.direct_import_exists(importer="providers.streams", imported="providers.base")
