"""Lease holders that are not replicas of this install are nobody (kube/holders.py, the rules of
kube/leases.py, the console's leader peer), against the embedded API server over real HTTP:
a made-up holder, a gone Pod or another UID is ignored and said once; a live Pod of the
namespace is trusted, with its IPs; an API server that errs, or a namespace with more Pods
than are judged, trusts every holder (fail open: never two replicas on one provider); a
spoofed node Lease stays takeable and revokes no fence, spoofed members do not count, and a
leader Lease's console URL must name an IP of its holder's Pod."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from console.leaderpeer import LeaseLocator, NoLeader, Peer
from kube import holders as holders_module
from kube import names
from kube.client import Kube, UnreachableError
from kube.holders import ANY, PodHolders, parse_identity, pod_identity
from kube.leases import MEMBER, NODE, SharedLeases, lease_path, member_lease, node_lease
from tests.support.spoofing import manager_pod, spoof

NS = "default"


def test_identities_name_a_pod_and_its_uid_and_nothing_else_parses() -> None:
    uid = str(uuid.uuid4())
    assert parse_identity(pod_identity("nebula-manager-7d9f-abcde", uid)) == ("nebula-manager-7d9f-abcde", uid)
    for text in ("", "host-123-abcdef", "_uid", "pod_", "a_b_c"):
        assert parse_identity(text) is None, text


def test_only_a_live_manager_pod_with_its_uid_is_trusted_and_each_stranger_is_said_once(
    kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    own = manager_pod(kube, "manager-a")
    other = manager_pod(kube, "manager-b", ip="10.0.0.8")
    tenant = manager_pod(kube, "tenant-app", labels={"app.kubernetes.io/name": "web"})
    holders = PodHolders(kube, namespace=NS, own=own)
    assert holders.trusted(own) and holders.trusted("")
    assert holders.trusted(tenant)  # any Pod of the namespace: who may create one may run the manager's account
    assert holders.trusted(other) and holders.addresses(other) == frozenset({"10.0.0.8"})
    strangers = {
        "mallory": "not of the form",
        pod_identity("gone", str(uuid.uuid4())): "no Pod default/gone",
        pod_identity("manager-b", str(uuid.uuid4())): "another UID",
    }
    with caplog.at_level(logging.WARNING, logger="kube.holders"):
        for identity in strangers:
            assert not holders.trusted(identity) and not holders.trusted(identity)
    said = [r.getMessage() for r in caplog.records if r.name == "kube.holders"]
    assert len(said) == len(strangers), said  # once each, though asked twice
    for identity, why in strangers.items():
        assert any(repr(identity) in line and why in line for line in said), (identity, said)


def test_a_holder_whose_pod_cannot_be_read_is_trusted_so_no_live_replica_is_ever_taken_over(kube: Kube) -> None:
    class Erring:
        def list(self, path: str, **_: Any) -> Any:
            raise UnreachableError(0, "Unreachable", "the API server does not answer")

    holders = PodHolders(Erring(), namespace=NS, own="x_1")  # type: ignore[arg-type]
    assert holders.trusted(pod_identity("manager-z", str(uuid.uuid4())))


def test_I7_made_up_holders_cost_neither_memory_nor_a_read_each(kube: Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holders_module, "REMEMBERED", 16)
    lists: list[str] = []

    class Counting:
        def list(self, path: str, **selectors: str) -> Any:
            lists.append(path)
            return kube.list(path, **selectors)

    holders = PodHolders(Counting(), namespace=NS, own="x_1", clock=lambda: 100.0)  # type: ignore[arg-type]
    for i in range(1000):
        assert not holders.trusted(pod_identity(f"mallory-{i}", str(uuid.uuid4())))
    assert len(holders._reported) <= 16
    assert len(lists) == 1  # one list for all of them (the clock stands still: no REFRESH second passed)


def test_a_namespace_with_more_pods_than_judged_trusts_every_holder(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(holders_module, "MAX_PODS", 2)
    own = manager_pod(kube, "manager-a")
    for name in ("other-1", "other-2"):
        manager_pod(kube, name)
    holders = PodHolders(kube, namespace=NS, own=own)
    assert holders.trusted(pod_identity("gone", str(uuid.uuid4())))  # cannot judge: fails open


def test_a_spoofed_node_lease_stays_takeable_revokes_no_fence_and_spoofed_members_do_not_count(kube: Kube) -> None:
    own = manager_pod(kube, "manager-a")
    other = manager_pod(kube, "manager-b")
    holders = PodHolders(kube, namespace=NS, own=own)
    leases = SharedLeases(kube, namespace=NS, identity=own, duration=30, margin=10, holders=holders)
    peer = SharedLeases(kube, namespace=NS, identity=other, duration=30, margin=10, holders=holders)
    assert leases.hold(member_lease(own), MEMBER) and peer.hold(member_lease(other), MEMBER)
    assert leases.hold(node_lease("gpu"), NODE)
    fence = leases.fence(node_lease("gpu"))
    for i in range(3):
        spoof(kube, member_lease(f"mallory-{i}"), f"mallory-{i}", MEMBER)
    spoof(kube, node_lease("gpu"), "mallory", NODE)
    leases.refresh()
    assert leases.view.members(leases.clock()) == sorted([own, other])  # the three spoofed members ignored
    assert fence.valid()  # a spoofed holder revokes nothing
    assert leases.view.takeable(node_lease("gpu"), own, leases.clock())
    assert leases.hold(node_lease("gpu"), NODE)  # the next renewal takes it back
    assert kube.get(lease_path(NS, node_lease("gpu")))["spec"]["holderIdentity"] == own
    spoof(kube, node_lease("gpu"), other, NODE)  # a real replica holding it does revoke
    leases.refresh()
    assert not fence.valid()


def test_the_console_url_is_taken_only_from_a_replica_and_only_at_its_pods_address(kube: Kube) -> None:
    own = manager_pod(kube, "manager-a", ip="10.0.0.7")
    leader = manager_pod(kube, "manager-b", ip="10.0.0.8")
    holders = PodHolders(kube, namespace=NS, own=own)
    locate = LeaseLocator(kube, namespace=NS, name="nebula-manager", identity=own, holders=holders)
    url = names.CONSOLE_URL_ANNOTATION
    spoof(kube, "nebula-manager", leader, "leader", {url: "http://10.0.0.8:8443"})
    assert locate() == Peer("http://10.0.0.8:8443")
    spoof(kube, "nebula-manager", leader, "leader", {url: "http://203.0.113.9:8443"})  # the URL edited
    with pytest.raises(NoLeader, match="not an address of its holder's Pod"):
        locate()
    spoof(kube, "nebula-manager", "mallory", "leader", {url: "http://10.0.0.8:8443"})  # the holder spoofed
    with pytest.raises(NoLeader, match="no replica holds"):
        locate()
    unchecked = LeaseLocator(kube, namespace=NS, name="nebula-manager", identity=own, holders=ANY)
    assert unchecked() == Peer("http://10.0.0.8:8443")  # not running as a Pod: as before
