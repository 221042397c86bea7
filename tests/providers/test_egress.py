"""The egress policy values (providers/egress.py): allowlist parsing and descriptions."""

from __future__ import annotations

import pytest

from providers.base import ProvisionRequest
from providers.claim import claim_name
from providers.egress import OPEN, Egress, EgressMode, allowlist


def test_an_allowlist_splits_cidrs_from_domains_lower_cased_and_deduplicated() -> None:
    policy = allowlist(["10.0.0.0/8", " Example.COM ", "*.pypi.org", "example.com", "2001:db8::/32"])
    assert policy == Egress(EgressMode.ALLOWLIST, ("10.0.0.0/8", "2001:db8::/32"), ("example.com", "*.pypi.org"))
    assert policy.describe() == "Allowlist (2 CIDRs, 2 domains)"
    assert OPEN.describe() == "Open" and Egress(EgressMode.BLOCKED).describe() == "Blocked"


@pytest.mark.parametrize(
    ("targets", "words"),
    [
        ([], "at least one target"),
        (["10.0.0.1/8"], "targets[0]: '10.0.0.1/8' is not a CIDR"),
        (["ok.example", "not a domain"], "targets[1]: 'not a domain' is neither a CIDR"),
        (["x"] * 65, "at most 64 targets"),
        (["300.1.1.1"], "is not a CIDR"),
    ],
)
def test_a_bad_allowlist_names_the_entry_and_what_it_must_look_like(targets: list[str], words: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        allowlist(targets)
    assert words in str(caught.value)


def test_the_request_repr_shows_the_policy_and_no_targets() -> None:
    request = ProvisionRequest(claim_name("ns", "p", "u"), egress=allowlist(["internal.example"]))
    assert "Allowlist (1 domain)" in repr(request) and "internal.example" not in repr(request)
