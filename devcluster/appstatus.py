"""The status the apps controllers write: ReplicaSet and Deployment counts and conditions, as
kube-controller-manager's replicaset and deployment controllers compute them.

Pure functions of the observed objects and the time; `controllers.AppsController` calls them and
writes the result through the status subresource. "Ready" is the Pod's Ready condition;
"available" is ready (minReadySeconds is not honoured here). Never does I/O.
Tests: tests/devcluster/test_apps_tables.py::test_deployment_status_counts_follow_ready_pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _labels_match(pod: Mapping[str, Any], template: Mapping[str, Any]) -> bool:
    want = (template.get("metadata") or {}).get("labels") or {}
    have = (pod.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in want.items())


def replicaset_status(replicaset: Mapping[str, Any], active: Sequence[Mapping[str, Any]]) -> Obj:
    """replicas (active Pods), fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration."""
    template = (replicaset.get("spec") or {}).get("template") or {}
    ready = sum(1 for pod in active if pod_ready(pod))
    return {
        "replicas": len(active),
        "fullyLabeledReplicas": sum(1 for pod in active if _labels_match(pod, template)),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": (replicaset.get("metadata") or {}).get("generation", 1),
    }


def _condition(old: Mapping[str, Any], kind: str, status: str, reason: str, message: str, now: str) -> Obj:
    """A condition that keeps its times while its status and reason stay the same."""
    previous = next((c for c in old.get("conditions") or [] if c.get("type") == kind), None)
    same = previous is not None and previous.get("status") == status
    unchanged = same and previous is not None and previous.get("reason") == reason
    return {
        "type": kind,
        "status": status,
        "lastUpdateTime": previous.get("lastUpdateTime", now) if unchanged and previous else now,
        "lastTransitionTime": previous.get("lastTransitionTime", now) if same and previous else now,
        "reason": reason,
        "message": message,
    }


def deployment_status(
    deployment: Mapping[str, Any],
    current: Mapping[str, Any] | None,
    owned: Sequence[Mapping[str, Any]],
    *,
    now: str,
) -> Obj:
    """Counts summed over the Deployment's ReplicaSets (updated: the current one's) and the
    Available and Progressing conditions with the real controller's reasons and messages."""
    spec, old = deployment.get("spec") or {}, deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))

    def total(key: str, replicasets: Sequence[Mapping[str, Any]]) -> int:
        return sum(int((rs.get("status") or {}).get(key, 0)) for rs in replicasets)

    replicas, available = total("replicas", owned), total("availableReplicas", owned)
    updated = total("replicas", [current] if current is not None else [])
    status: Obj = {
        "observedGeneration": (deployment.get("metadata") or {}).get("generation", 1),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": total("readyReplicas", owned),
        "availableReplicas": available,
    }
    if wanted > available:
        status["unavailableReplicas"] = wanted - available
    if available >= wanted:
        reason, message = "MinimumReplicasAvailable", "Deployment has minimum availability."
        availability = _condition(old, "Available", "True", reason, message, now)
    else:
        reason, message = "MinimumReplicasUnavailable", "Deployment does not have minimum availability."
        availability = _condition(old, "Available", "False", reason, message, now)
    if current is None:
        return {**status, "conditions": [availability]}
    name = (current.get("metadata") or {}).get("name", "")
    if updated == wanted and replicas == wanted and available >= wanted:
        reason, message = "NewReplicaSetAvailable", f'ReplicaSet "{name}" has successfully progressed.'
    else:
        reason, message = "ReplicaSetUpdated", f'ReplicaSet "{name}" is progressing.'
    progress = _condition(old, "Progressing", "True", reason, message, now)
    status["conditions"] = [availability, progress]
    return status
