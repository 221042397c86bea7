"""An Owner is one cluster and one alias; its key is what every instance carries."""

from __future__ import annotations

import pytest

from providers.owner import STANDALONE_CLUSTER, Owner


def test_the_key_joins_cluster_and_alias_with_a_dot_neither_may_contain() -> None:
    owner = Owner("3f1c2a9e-0b7d-4e7a-9b51-2a8f0c6d1e44", "gpu-east")
    assert owner.key == "3f1c2a9e-0b7d-4e7a-9b51-2a8f0c6d1e44.gpu-east"
    assert Owner.standalone("local") == Owner(STANDALONE_CLUSTER, "local")


@pytest.mark.parametrize(
    ("cluster", "alias", "what"),
    [("", "local", "cluster name"), ("a.b", "local", "cluster name"), ("Prod", "local", "cluster name"),
     ("c", "-x", "provider alias"), ("c", "x" * 64, "provider alias")],
)  # fmt: skip
def test_a_part_that_is_not_a_dns_label_is_refused_by_name(cluster: str, alias: str, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        Owner(cluster, alias)
