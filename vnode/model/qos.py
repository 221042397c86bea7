"""A Pod's QoS class (`status.qosClass`), by the rules the API server sets it with
(`ComputePodQOS`, pkg/apis/core/v1/helper/qos): only cpu and memory count, zero quantities
are no quantity, every app and init container counts, and pod-level `spec.resources` (when it
names cpu or memory) stands for the containers'.

Called by `vnode.model.status` for every status the vnode writes (the API server's own value,
when the Pod has one, wins). Pure; never does I/O. Tests: tests/vnode/test_status_details.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from providers.podspec import parse_quantity

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"
_COMPUTE = ("cpu", "memory")


def _positive(section: Mapping[str, Any] | None) -> dict[str, Decimal]:
    """The cpu and memory quantities above zero of one `requests` or `limits` (an unreadable
    quantity, which the API server would have refused, counts as none)."""
    found = {}
    for name in _COMPUTE:
        raw = (section or {}).get(name)
        if raw is None:
            continue
        try:
            quantity = parse_quantity(raw)
        except ValueError:
            continue
        if quantity > 0:
            found[name] = quantity
    return found


def _with_defaults(resources: Mapping[str, Any]) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """(requests, limits), a request defaulted to its limit where only the limit is set, as
    the API server's defaulting does before it computes the class."""
    limits = _positive(resources.get("limits"))
    requests = _positive({**(resources.get("limits") or {}), **(resources.get("requests") or {})})
    return requests, limits


def qos_class(pod: Mapping[str, Any]) -> str:
    """`Guaranteed` (every container limits cpu and memory, requests equal to limits),
    `BestEffort` (no cpu or memory request or limit anywhere), else `Burstable`."""
    spec = pod.get("spec") or {}
    pod_level = spec.get("resources") or {}
    if _positive(pod_level.get("requests")) or _positive(pod_level.get("limits")):
        groups = [pod_level]
    else:
        containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
        groups = [c.get("resources") or {} for c in containers if isinstance(c, Mapping)]
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for resources in groups:
        own_requests, own_limits = _with_defaults(resources)
        for name, quantity in own_requests.items():
            requests[name] = requests.get(name, Decimal(0)) + quantity
        for name, quantity in own_limits.items():
            limits[name] = limits.get(name, Decimal(0)) + quantity
        if set(own_limits) != set(_COMPUTE):
            guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed and requests == limits:
        return GUARANTEED
    return BURSTABLE
