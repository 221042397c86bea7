"""claim_name(): deterministic, a DNS label of at most 63 characters, readable, UID-sensitive."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from providers.claim import MAX_LENGTH, claim_name

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_same_pod_gives_the_same_claim() -> None:
    assert claim_name("default", "web-0", "uid-1") == claim_name("default", "web-0", "uid-1")


def test_recreated_pod_with_same_name_gets_a_new_claim() -> None:
    assert claim_name("default", "web-0", "uid-1") != claim_name("default", "web-0", "uid-2")


def test_namespace_and_name_are_not_confused_across_the_separator() -> None:
    assert claim_name("a-b", "c", "u") != claim_name("a", "b-c", "u")


def test_claim_reads_as_namespace_and_name() -> None:
    assert claim_name("team-x", "trainer", "u").startswith("team-x-trainer-")


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("default", "x" * 253), ("n" * 63, "p" * 253), ("UPPER", "Case.With.Dots"), ("-", "-"), ("", "")],
)
def test_long_or_odd_names_still_give_a_dns_label(namespace: str, name: str) -> None:
    claim = claim_name(namespace, name, "0d4c7e3a-9b1f-4f7e-8f7e-2f1f9f0e6a11")
    assert len(claim) <= MAX_LENGTH
    assert DNS_LABEL.match(claim), claim


@given(st.text(max_size=300), st.text(max_size=300), st.text(max_size=40))
def test_every_input_gives_a_dns_label_of_at_most_63_characters(namespace: str, name: str, uid: str) -> None:
    claim = claim_name(namespace, name, uid)
    assert len(claim) <= MAX_LENGTH
    assert DNS_LABEL.match(claim), claim
