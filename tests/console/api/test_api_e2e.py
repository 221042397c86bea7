"""The API over a running stack: the blocked scope counts down, the Pods, claims, nodes and
pools come from the Handlers' and placement's memory, and a staff DELETE leaves an Event."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from console import runtime
from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from tests.support.polling import wait_for
from tests.support.rigs.placement import Stack, deployment, events_for, nodepool, pods_of, provider_of

DEPLOYMENTS = path_for("deployments", namespace="default", group="apps", version="v1")


@pytest.fixture
def installed(stack: Stack) -> Iterator[Stack]:
    runtime.install(handlers=[r.handler for r in stack.runners], placement=stack.placement)
    yield stack
    runtime.clear()


def test_api_shows_the_blocked_scope_counting_down_and_the_live_state(
    db: Any, cluster: DevCluster, kube: Kube, installed: Stack
) -> None:
    client = APIClient()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    cluster.apply_manifest(nodepool("train", providers=["gpu-a", "gpu-b"], capacity_types=["Spot"], ttl="1m"))
    kube.create(DEPLOYMENTS, deployment("api", replicas=1, pool="train"))
    wait_for(lambda: [p for p in pods_of(kube, "api") if (p.get("status") or {}).get("phase") == "Running"])
    installed.providers["gpu-a"].cloud.refuse("capacity", accelerator="h100", tier="Spot")
    kube.patch(f"{DEPLOYMENTS}/api", {"spec": {"replicas": 2}})
    wait_for(lambda: any(provider_of(p) == "gpu-b" for p in pods_of(kube, "api")), timeout=10)

    first = wait_for(lambda: client.get("/api/blocklist/?pool=train").json()["results"])
    time.sleep(1.1)
    second = client.get("/api/blocklist/?pool=train").json()["results"]
    assert [e["id"] for e in first] == [e["id"] for e in second]
    assert second[0]["seconds_left"] < first[0]["seconds_left"] <= 66
    assert second[0]["scope"] == {"breadth": "offering", "tier": "Spot", "accelerator": "h100", "region": "us-east-1"}

    pods = client.get("/api/pods/").json()["results"]
    assert {(p["provider"], p["pool"]) for p in pods if p["phase"] == "Running"} == {
        ("gpu-a", "train"),
        ("gpu-b", "train"),
    }
    claims = client.get("/api/claims/").json()["results"]
    assert {c["provider"] for c in claims} == {"gpu-a", "gpu-b"} and not any(c["orphan"] for c in claims)
    nodes = client.get("/api/nodes/").json()["results"]
    assert sorted(n["name"] for n in nodes) == ["nebula-gpu-a", "nebula-gpu-b"]
    (pool,) = client.get("/api/pools/").json()["results"]
    assert pool["valid"] and pool["blocklist_ttl_seconds"] == 60.0
    assert wait_for(lambda: client.get("/api/pools/").json()["results"][0]["status"].get("candidateCount")) == 2

    entry_id = second[0]["id"]
    assert client.delete(f"/api/blocklist/{entry_id}").status_code == 204
    assert client.get(f"/api/blocklist/{entry_id}").status_code == 404
    cleared = wait_for(lambda: events_for(kube, names.EVENT_BLOCK_CLEARED))
    assert cleared[0]["involvedObject"]["name"] == "nebula-gpu-a" and "cleared by ops" in cleared[0]["message"]


def test_an_invalid_pool_is_reported_in_its_status_and_on_its_pods(
    db: Any, cluster: DevCluster, kube: Kube, installed: Stack
) -> None:
    bad = nodepool("bad", providers=["gpu-a"], capacity_types=["spot"])
    cluster.apply_manifest(bad)  # the devcluster skips CRD schemas; placement checks again
    kube.create(DEPLOYMENTS, deployment("badpool", replicas=1, pool="bad"))
    message = wait_for(lambda: events_for(kube, names.EVENT_POOL_INVALID))[0]["message"]
    assert "spec.capacityTypes[0]: 'spot' is not one of Spot, OnDemand" in message
    path = path_for("nodepools", name="bad", group="nebula.io", version="v1alpha1")
    status = wait_for(lambda: kube.get(path).get("status"))
    assert status["conditions"][0]["reason"] == "Invalid" and "capacityTypes" in status["conditions"][0]["message"]


def test_a_gated_pod_is_listed_with_its_pool_and_what_it_waits_for(
    db: Any, cluster: DevCluster, kube: Kube, installed: Stack
) -> None:
    client = APIClient()
    client.force_login(User.objects.create_user("ops"))
    # Refused before the pool exists, so the catalog's first answer (asked when placement sees
    # the pool) already offers the shape as sold out: the Pod waits, nothing is tried.
    for provider in installed.providers.values():
        provider.cloud.refuse("capacity", accelerator="h100")
    cluster.apply_manifest(nodepool("sold", providers=["gpu-a", "gpu-b"], capacity_types=["Spot"], ttl="1m"))
    kube.create(DEPLOYMENTS, deployment("held", replicas=1, pool="sold"))
    (pod,) = wait_for(lambda: pods_of(kube, "held"))

    def listed() -> list[dict[str, Any]]:
        found = client.get("/api/pods/").json()["results"]
        return [p for p in found if p["name"] == pod["metadata"]["name"] and p["wait_reason"]]

    (row,) = wait_for(listed, timeout=10)
    # Placement notes what the Pod waits for, then writes the Event: the row may come first.
    (event,) = wait_for(lambda: events_for(kube, names.EVENT_WAITING_FOR_CAPACITY), timeout=10)
    assert (row["uid"], row["phase"], row["reason"], row["pool"]) == (
        pod["metadata"]["uid"],
        "Pending",
        names.REASON_SCHEDULING_GATED,
        "sold",
    )
    assert (row["wait_reason"], row["waiting_for"]) == (names.EVENT_WAITING_FOR_CAPACITY, event["message"])
    assert row["provider"] is None and row["node"] is None and row["claim"] is None
