"""Providers shared out across real `manage.py runvnode --share-providers` processes on the
embedded cluster, one fake cloud behind them all (`tests.support.rigs.managers`), with the
invariants of tests/vnode/test_invariants.py checked every 0.2 s throughout:

- three managers split six providers two each; the one SIGKILLed has its two taken over by
  the others within one lease duration plus a poll (and the start-up of a Runner), each Node
  then naming its new holder's kubelet port, the Pods on the same instances and new Pods on
  the orphaned nodes served;
- of two managers, the leader paused (SIGSTOP) past its leases: the other takes its provider
  over (and the leader Lease) and serves Pods created and deleted meanwhile; resumed, the
  paused one writes nothing for the provider it lost (its fence), stops that Runner, stands by
  instead of exiting, and the two share again, one each;
- two replicas running as manager Pods: member Leases made up or copied by someone who may
  write Leases do not shrink the shares (kube/holders.py);
- a replica running as a manager Pod serves its provider and leads though a stranger held the
  node and leader Leases (and renewed them) before it started, and again after one more write.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import DevCluster
from kube.client import Kube, path_for
from kube.holders import parse_identity, pod_identity
from kube.leases import MEMBER, NODE, member_lease, node_lease
from providers.fake.server import FakeCloudServer, start_server
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.managers import (
    InvariantWatch,
    Rig,
    SharedManager,
    delete_pod,
    kubelet_port,
    node_holders,
    running,
    shares,
)
from tests.support.spoofing import manager_pod, renew_as_holder, spoof

pytestmark = pytest.mark.slow

LEASE = 4  # seconds
POLL = 0.5
START = 15.0  # seconds a taken-over Runner may need to register, list the cloud and sync its Pods


@pytest.fixture
def cloud() -> Iterator[FakeCloudServer]:
    server = start_server()
    yield server
    server.close()


@pytest.fixture
def rig_for(cluster: DevCluster, cloud: FakeCloudServer, tmp_path: Path) -> Iterator[type[Rig]]:
    rigs: list[Rig] = []

    def make(aliases: list[str]) -> Rig:
        assert cluster.kubeconfig_path is not None
        rig = Rig(cluster.kubeconfig_path, cloud, tmp_path, aliases, lease=LEASE, poll=POLL)
        rigs.append(rig)
        return rig

    yield make  # type: ignore[misc]
    for rig in rigs:
        rig.close()


def leader(kube: Kube) -> str:
    lease = kube.get(path_for("leases", namespace="default", name="nebula-manager", group="coordination.k8s.io"))
    return str(lease["spec"].get("holderIdentity") or "")


def leadership_lines(*managers: SharedManager) -> str:
    """Each manager's log lines about the leader Lease, for a failed assertion to show."""
    marks = ("kube.leader", "leader lease", "leader election")
    return "\n".join(
        f"{m.name} ({m.identity}): {line}"
        for m in managers
        for line in m.log.read_text(errors="replace").splitlines()
        if any(mark in line for mark in marks)
    )


def create(kube: Kube, name: str, alias: str) -> str:
    kube.create(path_for("pods", namespace="default"), make_pod(name, alias))
    return name


def test_three_managers_share_six_providers_and_the_survivors_take_over_a_killed_ones(
    kube: Kube, cloud: FakeCloudServer, rig_for: type[Rig]
) -> None:
    aliases = [f"p{i}" for i in range(6)]
    rig = rig_for(aliases)
    managers = [rig.manager(name) for name in ("a", "b", "c")]
    for manager in managers:
        wait_for(manager.learn_identity, 60, 0.2, what=f"{manager.name} shares")
    identities = {m.identity for m in managers}
    wait_for(lambda: shares(kube, aliases) == dict.fromkeys(identities, 2), 60, 0.2, what="two providers each")
    pods = {create(kube, f"job-{alias}-{i}", alias) for alias in aliases for i in range(3)}
    with InvariantWatch(kube, cloud) as watch:
        wait_for(lambda: running(kube, pods), 90, 0.2, what="every Pod Running")
        before = {i["claim"]: i["id"] for i in cloud.cloud.instances()}
        victim = managers[0]
        orphaned = [a for a, holder in node_holders(kube, aliases).items() if holder == victim.identity]
        victim.kill()
        killed_at = time.monotonic()
        survivors = {m.identity for m in managers[1:]}
        wait_for(
            lambda: shares(kube, aliases) == dict.fromkeys(survivors, 3),
            LEASE + POLL + START,
            0.1,
            what="the killed manager's providers taken over",
        )
        took = time.monotonic() - killed_at
        holders = node_holders(kube, aliases)
        port_of = {m.identity: m.kubelet_port for m in managers}
        for alias in orphaned:  # the Node now sends kubectl logs/exec to its new holder
            wait_for(lambda a=alias: kubelet_port(kube, a) == port_of[holders[a]], 10, 0.1, what=f"{alias}'s address")
        late = {create(kube, f"late-{alias}", alias) for alias in orphaned}
        wait_for(lambda: running(kube, pods | late), 60, 0.2, what="the orphaned nodes serve new Pods")
        for name in sorted(pods)[:3]:
            delete_pod(kube, name)
        kept = pods - set(sorted(pods)[:3])
        wait_for(lambda: watch.settled(kept | late), 60, 0.2, what="one instance per live Pod, none for the deleted")
    assert watch.samples > 20
    assert watch.violations == []
    assert took <= LEASE + POLL + START
    after = {i["claim"]: i["id"] for i in cloud.cloud.instances()}
    assert {c: after[c] for c in before} == before  # the Pods kept their instances


def test_a_paused_manager_past_its_lease_is_fenced_and_the_two_share_again_once_it_resumes(
    kube: Kube, cloud: FakeCloudServer, rig_for: type[Rig]
) -> None:
    aliases = ["left", "right"]
    rig = rig_for(aliases)
    first, second = rig.manager("first"), rig.manager("second")
    for manager in (first, second):
        wait_for(manager.learn_identity, 60, 0.2, what=f"{manager.name} shares")
    wait_for(lambda: shares(kube, aliases) == {first.identity: 1, second.identity: 1}, 60, 0.2, what="one each")
    if leader(kube) != first.identity:  # pause the leader: it loses the leader Lease as well
        first, second = second, first
    (paused_alias,) = [a for a, h in node_holders(kube, aliases).items() if h == first.identity]
    pods = {create(kube, f"job-{alias}-{i}", alias) for alias in aliases for i in range(4)}
    with InvariantWatch(kube, cloud) as watch:
        wait_for(lambda: running(kube, pods), 90, 0.2, what="every Pod Running")
        first.signal(signal.SIGSTOP)
        wait_for(
            lambda: shares(kube, aliases) == {second.identity: 2}, 2 * LEASE + POLL + 10, 0.1, what="second holds both"
        )
        # The leader Lease too, before the first resumes: the sharing round and the elector poll
        # apart, so the node Leases may pass first; resumed before this, the first still leads.
        wait_for(lambda: leader(kube) == second.identity, 2 * LEASE + 10, 0.1, what="second leads")
        # While the first is paused: new Pods on its old node, and some deleted.
        late = {create(kube, f"late-{i}", paused_alias) for i in range(3)}
        gone = {f"job-{paused_alias}-0", f"job-{paused_alias}-1"}
        for name in gone:
            delete_pod(kube, name)
        wait_for(lambda: running(kube, (pods - gone) | late), 60, 0.2, what="the second serves the new Pods")
        wait_for(lambda: watch.settled((pods - gone) | late), 60, 0.2, what="the deleted Pods' instances gone")
        first.signal(signal.SIGCONT)
        wait_for(
            lambda: "lost; stopping its Runner" in first.log.read_text(errors="replace"),
            30,
            0.1,
            what="the resumed manager stops the Runner it lost",
        )
        wait_for(
            lambda: shares(kube, aliases) == {first.identity: 1, second.identity: 1},
            6 * LEASE + START,
            0.2,
            what="one each again",
        )
        assert leader(kube) == second.identity, leadership_lines(first, second)
        assert first.process is not None and first.process.poll() is None  # it stood by, and did not exit
        assert "lost the leader lease: placement, the mirror and the console stop here; standing by" in (
            first.log.read_text(errors="replace")
        )
        final = (pods - gone) | late | {create(kube, f"last-{alias}", alias) for alias in aliases}
        wait_for(lambda: running(kube, final), 60, 0.2, what="both nodes serve")
        wait_for(lambda: watch.settled(final), 60, 0.2, what="one instance per live Pod")
    assert watch.samples > 20
    assert watch.violations == []


def test_made_up_or_copied_member_leases_do_not_shrink_the_shares_of_replicas_running_as_pods(
    kube: Kube, cloud: FakeCloudServer, rig_for: type[Rig]
) -> None:
    """Two replicas running as (recorded) manager Pods share four providers, two each. Someone
    who may write Leases registers made-up members (Pods that do not exist), a copy of a live
    replica under another Lease name and an earlier version's identity form, renewed for
    three lease durations: the shares stay two each (before, five members made each replica
    give one provider back), and each replica says once that it ignores each made-up holder."""
    aliases = [f"s{i}" for i in range(4)]
    rig = rig_for(aliases)
    managers, identities = [], []
    for name in ("a", "b"):
        identity = manager_pod(kube, f"nebula-manager-{name}", ip="127.0.0.1")
        identities.append(identity)
        named = parse_identity(identity)
        assert named is not None
        managers.append(rig.manager(name, env={"POD_NAME": named[0], "POD_UID": named[1]}))
    for manager in managers:
        wait_for(manager.learn_identity, 60, 0.2, what=f"{manager.name} shares")
    first, second = managers
    assert [parse_identity(m.identity) for m in managers] == [parse_identity(i) for i in identities]
    two_each = {first.identity: 2, second.identity: 2}
    wait_for(lambda: shares(kube, aliases) == two_each, 60, 0.2, what="two providers each")
    made_up = [pod_identity(f"mallory-{i}", str(uuid.uuid4())) for i in range(3)]
    pods = {create(kube, f"job-{alias}", alias) for alias in aliases}
    with InvariantWatch(kube, cloud) as watch:
        wait_for(lambda: running(kube, pods), 90, 0.2, what="every Pod Running")
        ends = time.monotonic() + 3 * LEASE
        while time.monotonic() < ends:
            for identity in made_up:
                spoof(kube, member_lease(identity), identity, MEMBER)
            spoof(kube, "nebula-member-copy", second.identity, MEMBER)
            spoof(
                kube, member_lease("nebula-manager-a-4242-0a1b2c"), "nebula-manager-a-4242-0a1b2c", MEMBER
            )  # old form
            assert shares(kube, aliases) == two_each
            time.sleep(0.3)
        wait_for(lambda: watch.settled(pods), 60, 0.2, what="one instance per live Pod")
    assert watch.samples > 10
    assert watch.violations == []
    for manager in managers:
        text = manager.log.read_text(errors="replace")
        assert "giving" not in text, text[-3000:]  # no provider given back for the fake members
        for identity in made_up:
            assert len([line for line in text.splitlines() if f"'{identity}' is not a replica" in line]) == 1


def test_a_spoofed_node_lease_does_not_stop_a_replica_serving_its_provider(
    kube: Kube, cloud: FakeCloudServer, rig_for: type[Rig]
) -> None:
    """Someone who may write Leases holds the node Lease of the one provider and the leader
    Lease under made-up replica identities, renewing them as a holder would, before the
    replica starts (before, it waited forever). The replica takes both over and serves and
    leads a lease duration later; a stranger's write while it serves costs one more duration."""
    rig = rig_for(["s0"])
    strangers = {
        node_lease("s0"): pod_identity("mallory", str(uuid.uuid4())),
        "nebula-manager": pod_identity("mallory-leader", str(uuid.uuid4())),
    }
    for name, identity in strangers.items():
        spoof(kube, name, identity, NODE if name.startswith("nebula-node-") else "", duration=LEASE)
    identity = manager_pod(kube, "nebula-manager-a", ip="127.0.0.1")
    named = parse_identity(identity)
    assert named is not None
    manager = rig.manager("a", env={"POD_NAME": named[0], "POD_UID": named[1]})
    with InvariantWatch(kube, cloud) as watch:
        renewing = set(strangers)
        ends = time.monotonic() + 90
        while renewing and time.monotonic() < ends:  # until the replica has taken both over
            renewing = {name for name in renewing if renew_as_holder(kube, name, strangers[name])}
            time.sleep(0.3)
        assert not renewing, f"still held by the strangers: {sorted(renewing)}"
        wait_for(lambda: shares(kube, ["s0"]) == {identity: 1}, 10, 0.2, what="the replica holds s0")
        wait_for(lambda: leader(kube) == identity, 10, 0.2, what="the replica leads")
        first = {create(kube, "job-first", "s0")}
        wait_for(lambda: running(kube, first), 60, 0.2, what="the provider served")
        spoof(kube, node_lease("s0"), strangers[node_lease("s0")], NODE, duration=LEASE)  # once more, while it serves
        wait_for(lambda: shares(kube, ["s0"]) == {identity: 1}, 30, 0.2, what="taken over again")
        late = {create(kube, "job-late", "s0")}
        wait_for(lambda: running(kube, first | late), 60, 0.2, what="served again")
        wait_for(lambda: watch.settled(first | late), 60, 0.2, what="one instance per live Pod")
    assert watch.samples > 10
    assert watch.violations == []
    text = manager.log.read_text(errors="replace")
    assert "lease nebula-node-s0 was held by" in text and "taken over" in text, text[-3000:]
