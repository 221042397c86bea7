"""The scheduler's pure decisions: may a Pod be scheduled, which Node fits it, and why none does.

The scheduler loop (`schedloop`) calls these with the observed Pod and Nodes and does the
binding and the FailedScheduling Event itself. Nothing here does I/O or mutates its inputs.
Filters follow kube-scheduler's default plugins in their order: NodeUnschedulable,
TaintToleration, NodeAffinity (nodeSelector and required node affinity), plus Node readiness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TERMINAL_PHASES = ("Succeeded", "Failed")
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
REASON_NOT_READY = "node(s) were not ready"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def schedulable(pod: Mapping[str, Any]) -> bool:
    """True when the scheduler should place this Pod: unbound, ungated, not being deleted, not finished."""
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return (
        not spec.get("nodeName")
        and not spec.get("schedulingGates")
        and not metadata.get("deletionTimestamp")
        and status.get("phase") not in _TERMINAL_PHASES
    )


def pick_node(
    pod: Mapping[str, Any], nodes: list[dict[str, Any]], pod_counts: Mapping[str, int] | None = None
) -> str | None:
    """The name of the Node to bind `pod` to, or None when none fits.

    Among fitting Nodes the least loaded by `pod_counts` wins, ties (and no counts) by name.
    """
    counts = pod_counts or {}
    fitting = [_name(node) for node in nodes if unfit_reason(pod, node) is None]
    if not fitting:
        return None
    return min(fitting, key=lambda name: (counts.get(name, 0), name))


def explain(pod: Mapping[str, Any], nodes: list[dict[str, Any]]) -> str:
    """A kube-scheduler-style FailedScheduling message: a histogram of why each Node was filtered out."""
    if not nodes:
        return "0/0 nodes are available: no nodes available to schedule pods."
    histogram: dict[str, int] = {}
    for node in nodes:
        reason = unfit_reason(pod, node)
        if reason is not None:
            histogram[reason] = histogram.get(reason, 0) + 1
    # Go's sort.Strings over "<count> <reason>", exactly as FitError.Error() orders them.
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    available = len(nodes) - sum(histogram.values())
    return f"{available}/{len(nodes)} nodes are available: {', '.join(parts)}."


def unfit_reason(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """Why `node` cannot take `pod` (the first failing filter), or None when it fits."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    if not _ready(node):
        return REASON_NOT_READY
    if (node.get("spec") or {}).get("unschedulable") and not _tolerated(_UNSCHEDULABLE_TAINT, tolerations):
        return REASON_UNSCHEDULABLE
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in _BLOCKING_EFFECTS and not _tolerated(taint, tolerations):
            return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    if not _matches_affinity(pod, node):
        return REASON_AFFINITY
    return None


def _name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _tolerated(taint: Mapping[str, Any], tolerations: list[Mapping[str, Any]]) -> bool:
    return any(_tolerates(toleration, taint) for toleration in tolerations)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1 Toleration.ToleratesTaint: empty effect matches all, empty key with Exists matches all keys."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def _matches_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    metadata = node.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    selector: Mapping[str, str] = spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(_term_matches(term, labels, str(metadata.get("name", ""))) for term in terms)


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """Terms are ORed by the caller; within a term every expression must hold. An empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    by_label = all(_expression_matches(e, labels) for e in expressions)
    by_field = all(_expression_matches(f, {"metadata.name": name}) for f in fields)
    return by_label and by_field


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    value = labels.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            actual, bound = int(value), int(values[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False
