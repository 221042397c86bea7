"""Who is a replica of this install (kube/holders.py), and what that decides (kube/leases.py's
members, the console's leader peer), against the embedded API server over real HTTP: a
made-up holder, a gone Pod or another UID is not one and is said once; a live Pod of the
namespace is, with its IPs; made-up or copied member Leases never shrink a share; a leader
Lease's console URL must name an IP of its holder's Pod; an API server that errs is judged by
the last good list for TRUST_TTL, then no other holder counts (nor does one past MAX_PODS),
with at most one list a second however many holders or callers ask."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import pytest

from console.leaderpeer import LeaseLocator, NoLeader, Peer
from kube import holders as holders_module
from kube import names
from kube.client import Kube, UnreachableError, path_for
from kube.holders import ANY, PodHolders, parse_identity, pod_identity
from kube.leases import MEMBER, SharedLeases, member_lease
from tests.support.clock import ManualClock
from tests.support.spoofing import manager_pod, spoof

NS = "default"


class Counting:
    """A Kube that counts its lists (and fails them while `down`)."""

    def __init__(self, kube: Kube | None) -> None:
        self.kube, self.lists, self.down = kube, 0, kube is None

    def list(self, path: str, **selectors: str) -> Any:
        self.lists += 1
        if self.down or self.kube is None:
            raise UnreachableError(0, "Unreachable", "the API server does not answer")
        return self.kube.list(path, **selectors)


def test_identities_name_a_pod_and_its_uid_and_are_valid_in_a_lease_name() -> None:
    uid = str(uuid.uuid4())
    identity = pod_identity("nebula-manager-7d9f-abcde", uid)
    assert parse_identity(identity) == ("nebula-manager-7d9f-abcde", uid)
    for text in ("", "mallory", "a_b", "nebula-manager-7d9f-abcde-not-a-uid", "nebula-manager-7d9f-12345-0a1b2c"):
        assert parse_identity(text) is None, text
    assert set(member_lease(identity)) <= set("abcdefghijklmnopqrstuvwxyz0123456789-.")  # an RFC 1123 name


def test_only_a_live_pod_of_the_namespace_with_its_uid_is_a_replica_and_each_stranger_is_said_once(
    kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    own = manager_pod(kube, "manager-a")
    other = manager_pod(kube, "manager-b", ip="10.0.0.8")
    holders = PodHolders(kube, namespace=NS, own=own)
    assert holders.trusted(own) and holders.trusted("")
    assert holders.trusted(other) and holders.addresses(other) == frozenset({"10.0.0.8"})
    assert holders.replica_of(other) == "manager-b"
    strangers = {
        "mallory": "not of the form",
        pod_identity("gone", str(uuid.uuid4())): "no Pod default/gone",
        pod_identity("manager-b", str(uuid.uuid4())): "another UID",
        "manager-b-4242-0a1b2c": "not of the form",  # an earlier version's form: counting it less is safe
    }
    with caplog.at_level(logging.WARNING, logger="kube.holders"):
        for identity in strangers:
            assert not holders.trusted(identity) and not holders.trusted(identity)
    said = [r.getMessage() for r in caplog.records if r.name == "kube.holders"]
    assert len(said) == len(strangers), said  # once each, though asked twice
    for identity, why in strangers.items():
        assert any(repr(identity) in line and why in line for line in said), (identity, said)


def test_an_api_server_that_errs_is_asked_at_most_once_a_second_and_the_last_good_list_holds_for_its_ttl(
    kube: Kube,
) -> None:
    clock = ManualClock(100.0)
    own = manager_pod(kube, "manager-a")
    other = manager_pod(kube, "manager-b")
    counting = Counting(kube)
    holders = PodHolders(counting, namespace=NS, own=own, clock=clock)  # type: ignore[arg-type]
    assert holders.trusted(other) and counting.lists == 1
    counting.down = True
    clock.now += holders_module.REFRESH
    for _ in range(100):
        assert not holders.trusted(pod_identity("manager-z", str(uuid.uuid4())))  # unknown: one list, failed
        assert holders.trusted(other)  # the last good list still holds
    assert counting.lists == 2
    clock.now += holders_module.TRUST_TTL
    assert not holders.trusted(other)  # cannot tell any more: only this replica counts
    assert holders.addresses(other) == frozenset()  # and no console is forwarded to
    counting.down = False
    clock.now += holders_module.REFRESH
    assert holders.trusted(other)


def test_one_list_answers_every_caller_asking_at_once(kube: Kube) -> None:
    own = manager_pod(kube, "manager-a")

    class Slow(Counting):
        def list(self, path: str, **selectors: str) -> Any:
            time.sleep(0.3)
            return super().list(path, **selectors)

    slow = Slow(kube)
    holders = PodHolders(slow, namespace=NS, own=own)  # type: ignore[arg-type]
    asking = [
        threading.Thread(target=holders.trusted, args=(pod_identity(f"m-{i}", str(uuid.uuid4())),)) for i in range(20)
    ]
    for thread in asking:
        thread.start()
    for thread in asking:
        thread.join(30)
    assert slow.lists == 1


def test_I7_made_up_holders_cost_neither_memory_nor_a_read_each(kube: Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holders_module, "REMEMBERED", 16)
    counting = Counting(kube)
    holders = PodHolders(counting, namespace=NS, own="x", clock=lambda: 100.0)  # type: ignore[arg-type]
    for i in range(1000):
        assert not holders.trusted(pod_identity(f"mallory-{i}", str(uuid.uuid4())))
    assert len(holders._reported) <= 16
    assert counting.lists == 1  # one list for all of them (the clock stands still: no REFRESH second passed)


def test_a_namespace_with_more_pods_than_judged_counts_no_other_holder(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(holders_module, "MAX_PODS", 2)
    own = manager_pod(kube, "manager-a")
    for name in ("other-1",):
        manager_pod(kube, name)
    holders = PodHolders(kube, namespace=NS, own=own)
    other = manager_pod(kube, "other-3")
    assert not holders.trusted(other)  # cannot judge: counting fewer members is the safe side


def test_made_up_misnamed_or_copied_member_leases_never_shrink_a_share(kube: Kube) -> None:
    own = manager_pod(kube, "manager-a")
    other = manager_pod(kube, "manager-b")
    holders = PodHolders(kube, namespace=NS, own=own)
    leases = SharedLeases(kube, namespace=NS, identity=own, duration=30, margin=10, holders=holders)
    peer = SharedLeases(kube, namespace=NS, identity=other, duration=30, margin=10, holders=holders)
    assert leases.hold(member_lease(own), MEMBER) and peer.hold(member_lease(other), MEMBER)
    for i in range(3):
        made_up = pod_identity(f"mallory-{i}", str(uuid.uuid4()))
        spoof(kube, member_lease(made_up), made_up, MEMBER)  # no such Pod
    spoof(kube, "nebula-member-extra", other, MEMBER)  # a live replica's identity, under another name
    spoof(kube, member_lease("manager-b-4242-0a1b2c"), "manager-b-4242-0a1b2c", MEMBER)  # the same Pod again
    leases.refresh()
    members = leases.view.members(leases.clock())
    assert len(members) == 2 and {holders.replica_of(m) for m in members} == {"manager-a", "manager-b"}
    unchecked = SharedLeases(kube, namespace=NS, identity="dev", duration=30, margin=10, holders=ANY)
    unchecked.refresh()
    assert len(unchecked.view.members(unchecked.clock())) == 6  # not running as a Pod: only the name rule


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
    made_up = pod_identity("mallory", str(uuid.uuid4()))
    spoof(kube, "nebula-manager", made_up, "leader", {url: "http://10.0.0.8:8443"})  # the holder made up
    with pytest.raises(NoLeader, match="no replica holds"):
        locate()
    unchecked = LeaseLocator(kube, namespace=NS, name="nebula-manager", identity=own, holders=ANY)
    assert unchecked() == Peer("http://10.0.0.8:8443")  # not running as a Pod: as before


def test_a_leader_pod_listed_before_it_had_an_ip_is_listed_again_for_it(kube: Kube) -> None:
    clock = ManualClock(100.0)
    own = manager_pod(kube, "manager-a")
    body = {"metadata": {"name": "manager-c"}, "spec": {"nodeName": "w", "containers": [{"name": "m", "image": "n"}]}}
    pending = kube.create(path_for("pods", namespace=NS), body)
    identity = pod_identity("manager-c", pending["metadata"]["uid"])
    holders = PodHolders(kube, namespace=NS, own=own, clock=clock)
    assert holders.trusted(identity) and holders.addresses(identity) == frozenset()
    status = {"status": {"phase": "Running", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}]}}
    kube.patch(path_for("pods", namespace=NS, name="manager-c", subresource="status"), status)
    clock.now += holders_module.REFRESH
    assert holders.addresses(identity) == frozenset({"10.0.0.9"})


def test_an_ipv6_console_url_matches_its_pods_address_however_it_is_written(kube: Kube) -> None:
    own = manager_pod(kube, "manager-a")
    leader = manager_pod(kube, "manager-b", ip="fd00::8")
    holders = PodHolders(kube, namespace=NS, own=own)
    locate = LeaseLocator(kube, namespace=NS, name="nebula-manager", identity=own, holders=holders)
    spoof(kube, "nebula-manager", leader, "leader", {names.CONSOLE_URL_ANNOTATION: "http://[fd00:0:0::0008]:8443"})
    assert locate() == Peer("http://[fd00:0:0::0008]:8443")
