"""Interruptions end to end on the devcluster with the webhook and placement (the `alone` rig:
gpu-a sells H100 x8 Spot $10/h and OnDemand $30/h; no vnode serves its Node, so the test ends the
Pods itself, as the vnode does on a notice: the `nebula.io/interruption` record, `DisruptionTarget`,
phase Failed, reason SpotInterrupted). No candidate is blocked here, so what moves the Deployment's
third Pod to OnDemand is `interruption.fallbackToOnDemandAfter: 2` alone."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.interruptions import parse_history
from tests.support.polling import wait_for
from tests.support.rigs.placement import Alone, deployment, events_for, nodepool, pods_of, tier_of

PODS = path_for("pods", namespace="default")


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def placed(kube: Kube, app: str) -> list[dict[str, Any]]:
    """The app's Pods that placement placed and that have not ended."""
    return [
        p
        for p in pods_of(kube, app)
        if tier_of(p)
        and (p.get("status") or {}).get("phase") != "Failed"
        and not p["metadata"].get("deletionTimestamp")
    ]


def interrupt(kube: Kube, pod: dict[str, Any], issued_at: str) -> None:
    """What the vnode writes when a spot notice ends the Pod: the notice on the Pod, then its status."""
    meta = pod["metadata"]
    path = f"{PODS}/{meta['name']}"
    notice = {"kind": "SpotInterruption", "id": f"notice-{meta['name']}", "issuedAt": issued_at, "deadline": issued_at}
    kube.patch(path, {"metadata": {"annotations": {names.INTERRUPTION_ANNOTATION: json.dumps(notice)}}})
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": "gpu-a: SpotInterruption notice",
    }
    status = {"phase": "Failed", "reason": names.REASON_SPOT_INTERRUPTED, "message": "spot instance interrupted",
              "conditions": [condition]}  # fmt: skip
    kube.patch(f"{path}/status", {"status": status})


def test_two_interruptions_move_the_workloads_next_pod_to_on_demand(
    cluster: DevCluster, kube: Kube, alone: Alone
) -> None:
    pool = nodepool("spotty", providers=["gpu-a"], capacity_types=["Spot", "OnDemand"])
    pool["spec"]["interruption"] = {"fallbackToOnDemandAfter": 2, "window": "1h"}
    cluster.apply_manifest(pool)
    cluster.apply_manifest(deployment("trainer", replicas=1, pool="spotty"))

    issued = [stamp(time.time() - 1200), stamp(time.time() - 300)]  # within the window of 1h
    seen: set[str] = set()
    for round_, at in enumerate(issued):
        pod = wait_for(lambda: next(iter(placed(kube, "trainer")), None), what=f"Pod {round_ + 1} placed")
        assert tier_of(pod) == "Spot"
        assert pod["metadata"]["uid"] not in seen
        seen.add(pod["metadata"]["uid"])
        carried = (pod["metadata"].get("annotations") or {}).get(names.INTERRUPTIONS_ANNOTATION)
        assert parse_history(carried) == parse_history(",".join(issued[:round_]))  # the history so far rides along
        interrupt(kube, pod, at)

    third = wait_for(
        lambda: next((p for p in placed(kube, "trainer") if p["metadata"]["uid"] not in seen), None),
        what="the third Pod placed",
    )
    assert tier_of(third) == "OnDemand"
    assert third["metadata"]["annotations"][names.INTERRUPTIONS_ANNOTATION] == ",".join(issued)
    (fallback,) = wait_for(lambda: events_for(kube, names.EVENT_FALLBACK_TO_ON_DEMAND), what="the fallback Event")
    assert fallback["type"] == "Normal"
    assert fallback["involvedObject"]["name"] == third["metadata"]["name"]
    assert fallback["message"] == (
        "2 interruptions within 1h (spec.interruption.fallbackToOnDemandAfter: 2): placing on OnDemand"
    )
    placed_event = next(
        e for e in events_for(kube, names.EVENT_PLACED) if e["involvedObject"]["name"] == third["metadata"]["name"]
    )
    assert "placed on gpu-a OnDemand us-east-1 at $30.00/h" in placed_event["message"]
    assert "skipped Spot: 2 interruptions of this workload within 1h" in placed_event["message"]
    replacing = [e for e in events_for(kube, names.EVENT_REPLACING) if "SpotInterrupted" in e["message"]]
    assert len(replacing) == 2  # each interrupted Pod deleted once so its ReplicaSet replaces it
