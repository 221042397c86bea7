"""What an opted-in Pod asks placement for (its accelerator and GPU count), and whether placement
acts on it at all. Pure functions over the Pod dict, called by the placement controller. Never
parses labels or resources itself: `providers.podspec` is the one Pod reader (tested in
tests/placement/test_one_reader.py::test_placement_the_provider_and_the_blocklist_read_one_pod_alike).
The Pod's own price ceiling (`nebula.io/max-hourly-price`) is read here: tested in
tests/placement/test_price_ceiling.py::test_a_bad_ceiling_is_an_invalid_request_naming_the_annotation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kube import names
from providers import podspec, shapecheck

FAILED_PHASE = "Failed"
_PRICE = re.compile(r"^\$?(\d+(?:\.\d*)?|\.\d+)$")  # dollars: "3.50", "3", "$3.50"


class RequestError(ValueError):
    """The Pod's request can never be served as written; the message says what to change."""


@dataclass(frozen=True)
class WorkloadRequest:
    accelerator: str | None  # folded label value; None: CPU only
    gpu_count: int
    needs: tuple[shapecheck.Need, ...] = ()  # what the Pod asks beyond one plain container
    max_hourly_price: float | None = None  # `nebula.io/max-hourly-price` in dollars; None: no ceiling

    def describe(self) -> str:
        return "cpu" if self.accelerator is None else f"{self.accelerator} x{self.gpu_count}"


def labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def is_placeable(pod: Mapping[str, Any]) -> bool:
    """Opted in, still carrying our gate, not bound, not deleting, not ended (a Pod failed
    gated, by `failover.waitForCapacity`, keeps the gate)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if meta.get("deletionTimestamp") or spec.get("nodeName"):
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", FAILED_PHASE):
        return False
    if labels(pod).get(names.ENABLED_LABEL) != "true":
        return False
    return any(g.get("name") == names.PLACEMENT_GATE for g in spec.get("schedulingGates") or [])


def placed_pool(pod: Mapping[str, Any]) -> str:
    """The NodePool a Pod was placed through while it has not finished, else "": the pool its
    placement annotation names, with our gate gone and its phase neither Succeeded nor Failed."""
    meta = pod.get("metadata") or {}
    pool = str((meta.get("annotations") or {}).get(names.POOL_ANNOTATION) or "")
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    if not pool or any(g.get("name") == names.PLACEMENT_GATE for g in gates):
        return ""
    return "" if (pod.get("status") or {}).get("phase") in ("Succeeded", FAILED_PHASE) else pool


# A Failed Pod's reasons that mean "its candidate gave it up", each recording a block first:
# refused (ProvisionFailed), still queued past the pool's timeout, or interrupted (Preempted,
# SpotInterrupted and the other kinds of notice: names.INTERRUPTED_REASONS).
REPLACEABLE_REASONS = frozenset(
    {names.REASON_PROVISION_FAILED, names.REASON_QUEUED_TOO_LONG, *names.INTERRUPTED_REASONS}
)


def is_replaceable_failure(pod: Mapping[str, Any]) -> bool:
    """An opted-in Pod its candidate gave up (Failed with a reason of REPLACEABLE_REASONS) that
    a controller other than a Job owns: deleting it lets the owner (a ReplicaSet) create a fresh
    gated Pod, which skips the blocked candidate. A Job's Pod is kept: the Job controller
    replaces a Failed Pod itself, and its podFailurePolicy and backoffLimit read the Failed Pod."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or labels(pod).get(names.ENABLED_LABEL) != "true":
        return False
    if status.get("phase") != FAILED_PHASE or status.get("reason") not in REPLACEABLE_REASONS:
        return False
    owner = next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller") is True), None)
    return owner is not None and not (
        owner.get("kind") == "Job" and str(owner.get("apiVersion", "")).startswith("batch/")
    )


def replacement_cause(pod: Mapping[str, Any]) -> str:
    """Why a replaceable Pod is deleted, for its `Replacing` Event (after "deleted after")."""
    reason = (pod.get("status") or {}).get("reason")
    if reason == names.REASON_PREEMPTED:
        return "the provider reclaimed its instance (Preempted); its owner creates a replacement that skips the tier"
    if reason in names.INTERRUPTED_REASONS:
        return f"the provider interrupted its instance ({reason}); its owner creates a replacement that skips it"
    if reason == names.REASON_QUEUED_TOO_LONG:
        return (
            "its instance stayed queued past the pool's provisioning timeout (QueuedTooLong); its owner creates"
            " a replacement that skips that offering"
        )
    return "the provider refused it; its owner creates a replacement that skips the refusal"


def workload_request(pod: Mapping[str, Any]) -> WorkloadRequest:
    """The accelerator and GPU count of the PodSpec the provider will be given
    (`providers.podspec` is the one reader; its docstring has the rules). RequestError when
    that reader refuses the Pod (a count without a type, a fraction, a malformed quantity)."""
    try:
        spec = podspec.pod_spec_from_dict(pod)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    return WorkloadRequest(spec.accelerator, spec.gpu_count, shapecheck.needs(pod), max_hourly_price(pod))


def max_hourly_price(pod: Mapping[str, Any]) -> float | None:
    """The Pod's price ceiling in dollars an hour (annotation `nebula.io/max-hourly-price`, e.g.
    "3.50"), None without it; RequestError naming the annotation when it is not a price."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(names.MAX_HOURLY_PRICE_ANNOTATION)
    if raw is None:
        return None
    match = _PRICE.match(raw.strip()) if isinstance(raw, str) else None
    value = float(match.group(1)) if match else math.nan
    if not math.isfinite(value):
        raise RequestError(
            f"annotation {names.MAX_HOURLY_PRICE_ANNOTATION}: {raw!r} is not a price in dollars an hour;"
            f' write a number such as "3.50"'
        )
    return value
