"""End to end on the devcluster: placement replaces a controller-owned Pod its candidate gave
up (Preempted: a spot reclaim; QueuedTooLong: still provisioning past the pool's timeout) and
leaves an unowned one Failed. The `stack` rig's shape (tests/support/rigs/placement.py), with the
vnodes given a PoolPolicies (every pool's provisioning timeout 0.5 s) and, for the queue case,
a gpu-a whose H100 Spot offering never finds capacity."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.blocklist import Blocklist
from placement.request import is_replaceable_failure
from placement.wiring import start_placement
from providers.base import BlockBreadth, Tier
from providers.egress import OPEN, Egress
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.fixtures import ROOT, kube_for
from tests.support.polling import wait_for
from tests.support.rigs.placement import (
    Stack,
    deployment,
    events_for,
    h100_pod_template,
    h100_scenario,
    nodepool,
    pods_of,
    provider_of,
    tier_of,
)
from tests.support.rigs.runners import make_runner
from tests.support.servers.tls import TlsWsgiServer

DEPLOYMENTS = path_for("deployments", namespace="default", group="apps", version="v1")
PODS = path_for("pods", namespace="default")


class HalfSecond:
    """The PoolPolicies protocol: every pool's instances may queue 0.5 s."""

    def egress_of(self, pool: str | None) -> Egress:
        return OPEN

    def provisioning_timeout_of(self, pool: str | None) -> float | None:
        return None if pool is None else 0.5

    def replaces_on_rebalance(self, pool: str | None) -> bool:
        return False


def queued_scenario(provider: str) -> dict[str, Any]:
    """`h100_scenario`, its H100 Spot offering queued for an hour (no capacity)."""
    scenario = copy.deepcopy(h100_scenario(provider))
    h100 = scenario["offerings"].pop()
    prices = h100.pop("hourly_price")
    del h100["tiers"]
    scenario["offerings"] += [
        {**h100, "tier": "Spot", "hourly_price": prices["Spot"], "provisioning_delay": 3600},
        {**h100, "tier": "OnDemand", "hourly_price": prices["OnDemand"]},
    ]
    return scenario


@contextmanager
def stack_of(cluster: DevCluster, *, queued: bool) -> Iterator[Stack]:
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    suffix = uuid.uuid4().hex[:8]
    scenario = {
        "gpu-a": queued_scenario("gpu-a") if queued else h100_scenario("gpu-a"),
        "gpu-b": h100_scenario("gpu-b"),
    }
    providers = {
        name: FakeProvider(name, {"cloud": f"{name}-{suffix}", "scenario": scenario[name]}) for name in scenario
    }
    blocklist = Blocklist()
    runners = [make_runner(cluster, p, blocklister=blocklist, pools=HalfSecond()) for p in providers.values()]
    for runner in runners:
        runner.start()
    placement = start_placement(
        providers, kube=kube_for(cluster), watch_kube=kube_for(cluster), blocklist=blocklist, requeue_spread=0.1
    )
    try:
        yield Stack(providers, blocklist, runners, placement)
    finally:
        placement.stop(timeout=5)
        for runner in runners:
            runner.stop(timeout=5)


def bare_pod(name: str, pool: str) -> dict[str, Any]:
    """An opted-in Pod of `pool` that no controller owns."""
    template = h100_pod_template(pool, name)
    return make_pod(name, metadata=template["metadata"], spec=template["spec"])


def get(kube: Kube, name: str) -> dict[str, Any] | None:
    items = pods_of(kube, name)
    return items[0] if items else None


def status_of(pod: dict[str, Any] | None) -> tuple[str | None, str | None]:
    status = (pod or {}).get("status") or {}
    return status.get("phase"), status.get("reason")


def running(kube: Kube, app: str) -> list[dict[str, Any]]:
    return [p for p in pods_of(kube, app) if status_of(p)[0] == "Running"]


def replaced_for(kube: Kube, reason: str) -> list[str]:
    return [e["message"] for e in events_for(kube, names.EVENT_REPLACING) if reason in e["message"]]


def test_a_preempted_owned_pod_is_replaced_off_its_spot_offering_and_an_unowned_one_stays_failed(
    cluster: DevCluster, kube: Kube, webhook: TlsWsgiServer
) -> None:
    with stack_of(cluster, queued=False) as stack:
        cluster.apply_manifest(nodepool("reclaim", providers=["gpu-a", "gpu-b"], capacity_types=["Spot", "OnDemand"],
                                        ttl="1m"))  # fmt: skip
        kube.create(DEPLOYMENTS, deployment("owned", replicas=1, pool="reclaim"))
        kube.create(PODS, bare_pod("bare", "reclaim"))
        for app in ("owned", "bare"):
            (pod,) = wait_for(lambda app=app: running(kube, app), what=f"{app} runs")  # type: ignore[misc]
            assert (provider_of(pod), tier_of(pod)) == ("gpu-a", "Spot")
        cloud = stack.providers["gpu-a"].cloud

        def reclaim(pod: dict[str, Any]) -> None:
            cloud.lose(pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION])

        reclaim(running(kube, "bare")[0])
        wait_for(lambda: status_of(get(kube, "bare")) == ("Failed", names.REASON_PREEMPTED), what="bare fails")
        (entry,) = wait_for(lambda: stack.blocklist.entries(), what="the reclaimed offering is blocked")
        # The candidate it ran on, as an interruption (docs/interruptions.md): gpu-a sells Spot H100s
        # in one region, so its Spot offering is where the replacement cannot go.
        assert (entry.provider, entry.scope.breadth, entry.scope.tier, entry.pool) == (
            "gpu-a",
            BlockBreadth.OFFERING,
            Tier.SPOT,
            "reclaim",
        )
        (first,) = running(kube, "owned")
        reclaim(first)
        replacement = wait_for(
            lambda: [p for p in running(kube, "owned") if p["metadata"]["uid"] != first["metadata"]["uid"]],
            timeout=15,
            what="the owned Pod's replacement runs",
        )
        assert (provider_of(replacement[0]), tier_of(replacement[0])) != ("gpu-a", "Spot")
        only = [replacement[0]["metadata"]["uid"]]  # the replaced Pod goes once its spend is settled (a finalizer)
        wait_for(lambda: [p["metadata"]["uid"] for p in pods_of(kube, "owned")] == only, what="the replaced Pod gone")
        assert wait_for(lambda: replaced_for(kube, "Preempted"), what="the Replacing Event says why")
        assert status_of(get(kube, "bare")) == ("Failed", names.REASON_PREEMPTED)  # no controller: it stays
        assert not is_replaceable_failure(get(kube, "bare") or {})


def test_an_owned_pod_queued_too_long_is_replaced_elsewhere_and_an_unowned_one_stays_failed(
    cluster: DevCluster, kube: Kube, webhook: TlsWsgiServer
) -> None:
    """One Pod at a time: the first to queue blocks gpu-a's Spot H100, which would send a Pod
    placed after it straight elsewhere, so the unowned Pod is created only once the owned one's
    story is told and the block cleared."""
    with stack_of(cluster, queued=True) as stack:
        cluster.apply_manifest(nodepool("queue", providers=["gpu-a", "gpu-b"], capacity_types=["Spot", "OnDemand"],
                                        ttl="1m"))  # fmt: skip
        kube.create(DEPLOYMENTS, deployment("patient", replicas=1, pool="queue"))
        assert wait_for(lambda: replaced_for(kube, "QueuedTooLong"), what="the Replacing Event says why")
        (pod,) = wait_for(lambda: running(kube, "patient"), timeout=15, what="the owned Pod's replacement runs")
        assert (provider_of(pod), tier_of(pod)) != ("gpu-a", "Spot")
        entries = stack.blocklist.entries()
        assert entries and all(e.scope.breadth is BlockBreadth.OFFERING for e in entries)
        assert {(e.provider, e.scope.tier, e.pool) for e in entries} == {("gpu-a", Tier.SPOT, "queue")}
        assert all(e.scope.reason.startswith("QueuedTooLong: ") for e in entries)
        for entry in entries:
            stack.blocklist.clear(entry.id)

        kube.create(PODS, bare_pod("lonely", "queue"))
        wait_for(lambda: status_of(get(kube, "lonely")) == ("Failed", names.REASON_QUEUED_TOO_LONG), timeout=15,
                 what="the unowned queued Pod fails")  # fmt: skip
        lonely = get(kube, "lonely") or {}
        assert "0.5s" in lonely["status"]["message"]
        assert not is_replaceable_failure(lonely)
        assert {(e.provider, e.scope.tier) for e in stack.blocklist.entries()} == {("gpu-a", Tier.SPOT)}
        assert len(running(kube, "patient")) == 1


def failed_pod(reason: str, *, owned: bool = True) -> dict[str, Any]:
    """An opted-in Pod Failed for `reason`, owned by a ReplicaSet when `owned`."""
    refs = [{"kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}] if owned else []
    return make_pod(
        "p",
        labels={names.ENABLED_LABEL: "true"},
        metadata={"ownerReferences": refs},
        status={"phase": "Failed", "reason": reason},
    )


@pytest.mark.parametrize(
    "reason", [names.REASON_PROVISION_FAILED, names.REASON_PREEMPTED, names.REASON_QUEUED_TOO_LONG]
)
def test_only_given_up_reasons_of_owned_opted_in_pods_are_replaceable(reason: str) -> None:
    assert is_replaceable_failure(failed_pod(reason))
    assert not is_replaceable_failure(failed_pod(reason, owned=False))


@pytest.mark.parametrize("reason", [names.REASON_INSTANCE_LOST, names.REASON_FAILED, names.REASON_UNSUPPORTED_POD_SPEC])
def test_other_failure_reasons_are_not_replaceable(reason: str) -> None:
    assert not is_replaceable_failure(failed_pod(reason))
