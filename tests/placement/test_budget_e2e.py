"""Budgets end to end on the devcluster with the webhook, placement and the fake providers of the
`stack` (gpu-a: H100 Spot $10/h, OnDemand $30/h; gpu-b: Spot $20/h, OnDemand $40/h): a pool's
`maxHourlyCost` and `maxInstances` hold Pods gated with `BudgetExceeded` before any instance is
bought, a released commitment places the next at once, and `kubectl get nodepools` shows the
SPEND/H, TODAY, MONTH and BUDGET columns. The Pod's price ceiling excludes the dearer tier."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from devcluster import DevCluster
from kube import names
from kube.client import Kube, NotFoundError, path_for
from placement.waiting import PLACEMENT_RECHECK
from tests.support.clients.kubectl import KUBECTL_137, run_kubectl
from tests.support.polling import wait_for
from tests.support.rigs.placement import Stack, events_for, h100_pod_template, nodepool, pods_of, provider_of, tier_of

PODS = path_for("pods", namespace="default")
POOLS = path_for(names.NODEPOOL_PLURAL, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION)


def budget_pool(name: str, budget: dict[str, Any], *, providers: tuple[str, ...] = ("gpu-a",)) -> dict[str, Any]:
    pool = nodepool(name, providers=list(providers), capacity_types=["Spot"])
    pool["spec"]["budget"] = budget
    return pool


def create_pods(kube: Kube, pool: str, app: str, count: int, annotations: dict[str, str] | None = None) -> None:
    for index in range(count):
        template = h100_pod_template(pool, app)
        pod = {"metadata": dict(template["metadata"], name=f"{app}-{index}"), "spec": template["spec"]}
        if annotations:
            pod["metadata"]["annotations"] = annotations
        kube.create(PODS, pod)


def placed(kube: Kube, app: str) -> list[dict[str, Any]]:
    return [p for p in pods_of(kube, app) if provider_of(p)]


def running(kube: Kube, app: str) -> list[dict[str, Any]]:
    return [p for p in pods_of(kube, app) if (p.get("status") or {}).get("phase") == "Running"]


def held(kube: Kube, app: str) -> dict[str, str]:
    """Pod name -> the message of its BudgetExceeded Event."""
    return {
        e["involvedObject"]["name"]: e["message"]
        for e in events_for(kube, names.EVENT_BUDGET_EXCEEDED)
        if e["involvedObject"]["name"].startswith(f"{app}-")
    }


def gone(kube: Kube, name: str) -> bool:
    try:
        kube.get(f"{PODS}/{name}")
    except NotFoundError:
        return True
    return False


def test_max_hourly_cost_for_two_runs_exactly_two_of_five_and_a_deletion_places_the_next(
    cluster: DevCluster, kube: Kube, stack: Stack
) -> None:
    cluster.apply_manifest(budget_pool("capped", {"maxHourlyCost": 20}))
    create_pods(kube, "capped", "capped", 5)
    waiting = wait_for(lambda: len(held(kube, "capped")) == 3 and held(kube, "capped"), what="three Pods held")
    assert len(placed(kube, "capped")) == 2  # every Pod was looked at: two placed, three held
    for message in waiting.values():
        assert message.startswith("pool capped at $20.00/h of $20.00/h (spec.budget.maxHourlyCost; over it: "), message
    assert sorted(waiting) == sorted(p["metadata"]["name"] for p in pods_of(kube, "capped") if not provider_of(p))
    wait_for(lambda: len(running(kube, "capped")) == 2, what="two Running")
    assert len(stack.providers["gpu-a"].cloud.instances()) == 2  # no instance bought past the budget
    rate, instances, exceeded, limit = stack.placement.controller.budgets.state("capped")
    assert (rate.text(), instances) == ("$20.00/h", 2)
    gated = stack.placement.gated_pods()
    assert {g.reason for g in gated if g.pool == "capped"} == {names.REASON_BUDGET_EXCEEDED}

    victim = placed(kube, "capped")[0]["metadata"]["name"]
    kube.delete(f"{PODS}/{victim}", grace_seconds=0)
    wait_for(lambda: gone(kube, victim), what="the deleted Pod gone")
    deleted_at = time.monotonic()
    # Woken by the released commitment, not by the 60 s recheck of the held Pods.
    wait_for(lambda: len(placed(kube, "capped")) == 2, timeout=PLACEMENT_RECHECK / 3, what="the next Pod placed")
    print(f"placed the next {time.monotonic() - deleted_at:.2f}s after the deleted Pod went")
    assert len([p for p in pods_of(kube, "capped") if not provider_of(p)]) == 2

    if Path(KUBECTL_137).exists():
        assert cluster.kubeconfig_path
        done = run_kubectl(cluster.kubeconfig_path, "get", "nodepools", "capped")
        assert done.returncode == 0, done.stderr
        listing = done.stdout
        header = listing.splitlines()[0].split()
        assert header == [
            "NAME",
            "STRATEGY",
            "PROVIDERS",
            "READY",
            "PLACED",
            "SPEND/H",
            "TODAY",
            "MONTH",
            "BUDGET",
            "AGE",
        ]


def test_max_instances_holds_the_rest_with_the_count_in_the_event(
    kube: Kube, cluster: DevCluster, stack: Stack
) -> None:
    cluster.apply_manifest(budget_pool("counted", {"maxInstances": 2}, providers=("gpu-a", "gpu-b")))
    create_pods(kube, "counted", "counted", 4)
    waiting = wait_for(lambda: len(held(kube, "counted")) == 2 and held(kube, "counted"), what="two Pods held")
    assert len(placed(kube, "counted")) == 2
    for message in waiting.values():
        assert message.startswith("pool counted at 2 of 2 instances (spec.budget.maxInstances); next look at "), message
    clouds = [stack.providers[name].cloud for name in ("gpu-a", "gpu-b")]
    wait_for(lambda: sum(len(c.instances()) for c in clouds) == 2, what="two instances, no more")
    kube.patch(f"{POOLS}/counted", {"spec": {"budget": {"maxInstances": 3}}})
    wait_for(lambda: len(placed(kube, "counted")) == 3, what="a third placed once the spec allows it")
    assert len(held(kube, "counted")) == 2


def test_the_price_ceiling_excludes_the_dearer_tier_and_names_itself(
    kube: Kube, cluster: DevCluster, stack: Stack
) -> None:
    cluster.apply_manifest(nodepool("tiers", providers=["gpu-a"], capacity_types=["OnDemand", "Spot"]))
    create_pods(kube, "tiers", "plain", 1)
    create_pods(kube, "tiers", "ceiled", 1, {names.MAX_HOURLY_PRICE_ANNOTATION: "15"})
    create_pods(kube, "tiers", "cheap", 1, {names.MAX_HOURLY_PRICE_ANNOTATION: "5"})
    wait_for(lambda: placed(kube, "ceiled"), what="the ceiled Pod placed")
    assert [tier_of(p) for p in placed(kube, "ceiled")] == ["Spot"]  # OnDemand $30 is above $15
    assert wait_for(lambda: [tier_of(p) for p in placed(kube, "plain")]) == ["OnDemand"]  # listed first
    messages = wait_for(
        lambda: [e["message"] for e in events_for(kube, names.EVENT_NO_CANDIDATE) if "cheap-0" in str(e)],
        what="the NoCandidate Event of the Pod under $5",
    )
    assert messages[0].startswith("no offering in the pool is within the Pod's nebula.io/max-hourly-price $5.00: ")
    assert "gpu-a/h100 x8 Spot in us-east-1 $10.00/h: above the Pod's nebula.io/max-hourly-price $5.00" in messages[0]
