"""End to end on the devcluster: the webhook gates opted-in Pods of a Deployment, placement
puts them on the cheap provider, and fails over (and back) when it refuses."""

from __future__ import annotations

import time
from typing import Any

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.base import BlockBreadth, Tier
from tests.support.polling import wait_for
from tests.support.rigs.placement import Stack, deployment, events_for, nodepool, pods_of, provider_of, tier_of

DEPLOYMENTS = path_for("deployments", namespace="default", group="apps", version="v1")


def running_on(kube: Kube, app: str, count: int) -> list[tuple[str | None, str | None]] | None:
    pods = [p for p in pods_of(kube, app) if (p.get("status") or {}).get("phase") == "Running"]
    if len(pods) < count:
        return None
    return sorted((provider_of(p), tier_of(p)) for p in pods)


def scale(kube: Kube, name: str, replicas: int) -> None:
    kube.patch(f"{DEPLOYMENTS}/{name}", {"spec": {"replicas": replicas}})


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == names.PLACEMENT_GATE for g in pod["spec"].get("schedulingGates") or [])


def test_deployment_lands_on_cheap_spot_fails_over_within_2s_and_returns_after_ttl(
    cluster: DevCluster, kube: Kube, stack: Stack
) -> None:
    pool = nodepool("train", providers=["gpu-a", "gpu-b"], capacity_types=["Spot", "OnDemand"], ttl="4s")
    cluster.apply_manifest(pool)
    kube.create(DEPLOYMENTS, deployment("trainer", replicas=2, pool="train"))
    assert wait_for(lambda: running_on(kube, "trainer", 2)) == [("gpu-a", "Spot"), ("gpu-a", "Spot")]
    for pod in pods_of(kube, "trainer"):
        annotations = pod["metadata"]["annotations"]
        assert annotations[names.POOL_ANNOTATION] == "train"
        assert annotations[names.REGION_ANNOTATION] == "us-east-1"
        assert annotations[names.HOURLY_PRICE_ANNOTATION] == "10"
        assert pod["spec"]["tolerations"][0]["key"] == names.PROVIDER_KEY

    stack.providers["gpu-a"].cloud.refuse("capacity", accelerator="h100", tier="Spot")
    scale(kube, "trainer", 3)
    wait_for(lambda: stack.blocklist.entries(), timeout=10)
    refused_at = time.monotonic()
    wait_for(lambda: any(provider_of(p) == "gpu-b" for p in pods_of(kube, "trainer")), timeout=10)
    failover_seconds = time.monotonic() - refused_at
    print(f"failover took {failover_seconds:.2f}s")
    # Event-driven, not timer-driven: a broken path would wait for the TTL (minutes). The
    # figure itself (well under 2 s at zero provider delay) comes from runs, not this bound.
    assert failover_seconds < 6.0
    assert wait_for(lambda: running_on(kube, "trainer", 3), timeout=10) == [
        ("gpu-a", "Spot"),
        ("gpu-a", "Spot"),
        ("gpu-b", "Spot"),
    ]
    (entry,) = stack.blocklist.entries()
    assert (entry.provider, entry.scope.breadth, entry.scope.tier, entry.pool) == (
        "gpu-a",
        BlockBreadth.OFFERING,
        Tier.SPOT,
        "train",
    )
    assert 0 < entry.seconds_left <= 4 * 1.1  # the pool's TTL plus at most 10% jitter
    # The refused Pod was deleted so its ReplicaSet replaced it; it goes once its spend is
    # settled (the nebula.io/spend finalizer, docs/cost.md), a moment after the deletion.
    wait_for(
        lambda: not [p for p in pods_of(kube, "trainer") if (p.get("status") or {}).get("phase") == "Failed"],
        timeout=10,
        what="the refused Pod gone",
    )

    stack.providers["gpu-a"].cloud.clear()
    wait_for(lambda: not stack.blocklist.entries(), timeout=10)
    scale(kube, "trainer", 4)
    assert (wait_for(lambda: running_on(kube, "trainer", 4), timeout=10) or []).count(("gpu-a", "Spot")) == 3
    placed = [e["message"] for e in events_for(kube, names.EVENT_PLACED)]
    assert any("gpu-b Spot us-east-1" in m and "gpu-a Spot us-east-1: blocked" in m for m in placed)


def test_an_auth_refusal_blocks_the_whole_provider(cluster: DevCluster, kube: Kube, stack: Stack) -> None:
    pool = nodepool("auth", providers=["gpu-a", "gpu-b"], capacity_types=["Spot", "OnDemand"], ttl="1m")
    cluster.apply_manifest(pool)
    kube.create(DEPLOYMENTS, deployment("authfail", replicas=1, pool="auth"))
    assert wait_for(lambda: running_on(kube, "authfail", 1)) == [("gpu-a", "Spot")]
    stack.providers["gpu-a"].cloud.refuse("auth")
    scale(kube, "authfail", 2)  # one new Pod meets the refusal...
    wait_for(lambda: running_on(kube, "authfail", 2), timeout=15)
    (entry,) = stack.blocklist.entries()
    refusals = [c for c in stack.providers["gpu-a"].cloud.call_log() if c.method == "provision"]
    scale(kube, "authfail", 3)  # ...and no later Pod is sent to the blocked provider
    wait_for(lambda: running_on(kube, "authfail", 3), timeout=15)
    assert entry.scope.breadth is BlockBreadth.PROVIDER
    for tier in Tier:
        assert stack.blocklist.blocked("gpu-a", accelerator="h100", tier=tier, region="us-east-1") is not None
        assert stack.blocklist.blocked("gpu-a", accelerator=None, tier=tier, region="eu-west-1") is not None
    assert running_on(kube, "authfail", 3) == [("gpu-a", "Spot"), ("gpu-b", "Spot"), ("gpu-b", "Spot")]
    provisions = [c for c in stack.providers["gpu-a"].cloud.call_log() if c.method == "provision"]
    assert len(refusals) == 2 and provisions == refusals  # the first Pod, one refusal, nothing after the block


def test_every_candidate_refusing_keeps_pods_gated_without_spinning(
    cluster: DevCluster, kube: Kube, stack: Stack
) -> None:
    pool = nodepool("none", providers=["gpu-a", "gpu-b"], capacity_types=["Spot"], ttl="6s")
    cluster.apply_manifest(pool)
    stack.placement.catalog.views()  # cache the offerings as sold: the fake hides refused ones
    for provider in stack.providers.values():
        provider.cloud.refuse("capacity", accelerator="h100")
    kube.create(DEPLOYMENTS, deployment("stuck", replicas=2, pool="none"))

    def gated_pods() -> list[dict[str, Any]]:
        pods = [p for p in pods_of(kube, "stuck") if gated(p)]
        entries = stack.blocklist.entries()
        settled = len(entries) == 2 and all(e.pool == "none" for e in entries)
        seen = all(stack.placement.controller.attempts[f"default/{p['metadata']['name']}"] for p in pods)
        return pods if len(pods) == 2 and settled and seen else []

    keys = [f"default/{p['metadata']['name']}" for p in wait_for(gated_pods, timeout=15)]
    controller = stack.placement.controller
    # Let wake-ups queued by the refusals and their attribution run before the window opens:
    # the counts must hold still for half a second.
    settled_at, before = time.monotonic(), {key: controller.attempts[key] for key in keys}
    while time.monotonic() - settled_at < 0.5:
        time.sleep(0.05)
        now_counts = {key: controller.attempts[key] for key in keys}
        if now_counts != before:
            settled_at, before = time.monotonic(), now_counts
    provisions = sum(len([c for c in p.cloud.call_log() if c.method == "provision"]) for p in stack.providers.values())
    time.sleep(1.5)  # a window inside the 6s TTL: no expiry, no change, so no attempt and no call
    assert {key: controller.attempts[key] for key in keys} == before
    assert all(0 < n <= 2 for n in before.values())  # one on creation, one when the TTL was shortened
    calls = sum(len([c for c in p.cloud.call_log() if c.method == "provision"]) for p in stack.providers.values())
    assert calls == provisions
    assert all(gated(p) for p in pods_of(kube, "stuck") if p["metadata"]["name"] in {k[8:] for k in keys})
    both = ("gpu-a/h100 x8 Spot in us-east-1 blocked until", "gpu-b/h100 x8 Spot in us-east-1 blocked until")

    def waiting_for_both() -> list[dict[str, Any]]:
        events = events_for(kube, names.EVENT_WAITING_FOR_CAPACITY)
        return [e for e in events if all(b in e["message"] for b in both)]

    wait_for(waiting_for_both, timeout=10)  # written just after the wait is noted, by the same worker


def test_a_pod_waiting_for_sold_out_capacity_is_placed_when_it_returns_with_one_event(
    cluster: DevCluster, kube: Kube, stack: Stack
) -> None:
    """Nothing is refused (nothing is tried): the catalog says sold out, the Pod waits with one
    WaitingForCapacity Event, and the catalog's next answer after gpu-b sells again (it is asked
    every TTL while someone waits) wakes it."""
    # Refused before the pool exists, so the catalog's first answer (asked when placement sees
    # the pool) already offers the shape as sold out (the fake offers a refused shape so).
    for provider in stack.providers.values():
        provider.cloud.refuse("capacity", accelerator="h100")
    cluster.apply_manifest(nodepool("sold", providers=["gpu-a", "gpu-b"], capacity_types=["Spot"], ttl="1m"))
    kube.create(DEPLOYMENTS, deployment("later", replicas=1, pool="sold"))
    (event,) = wait_for(lambda: events_for(kube, names.EVENT_WAITING_FOR_CAPACITY), timeout=10)
    assert "gpu-a/h100 x8 Spot in us-east-1 sold out, gpu-b/h100 x8 Spot in us-east-1 sold out" in event["message"]
    (pod,) = pods_of(kube, "later")
    assert gated(pod)
    stack.providers["gpu-b"].cloud.clear()
    assert wait_for(lambda: running_on(kube, "later", 1), timeout=30) == [("gpu-b", "Spot")]
    assert not stack.blocklist.entries()
    assert [c for c in stack.providers["gpu-a"].cloud.call_log() if c.method == "provision"] == []
    assert len(events_for(kube, names.EVENT_WAITING_FOR_CAPACITY)) == 1  # the catalog's looks wrote none


def test_a_pod_naming_a_missing_pool_stays_gated_with_an_event(kube: Kube, stack: Stack) -> None:
    kube.create(DEPLOYMENTS, deployment("orphan", replicas=1, pool="nowhere"))
    wait_for(lambda: events_for(kube, names.EVENT_NO_POOL), timeout=10)
    (pod,) = pods_of(kube, "orphan")
    assert gated(pod) and not provider_of(pod)
    assert "does not exist" in events_for(kube, names.EVENT_NO_POOL)[0]["message"]
