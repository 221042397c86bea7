"""What an opted-in Pod asks placement for: its pool, accelerator and GPU count, and whether it
is placeable at all. Pure functions over the Pod dict, called by the placement controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kube import names

GPU_RESOURCE = "nvidia.com/gpu"
FAILED_PHASE = "Failed"


class RequestError(ValueError):
    """The Pod's request can never be served as written; the message says what to change."""


@dataclass(frozen=True)
class WorkloadRequest:
    accelerator: str | None  # lower-cased label value; None: CPU only
    gpu_count: int

    def describe(self) -> str:
        return "cpu" if self.accelerator is None else f"{self.accelerator} x{self.gpu_count}"


def labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def is_placeable(pod: Mapping[str, Any]) -> bool:
    """Opted in, still carrying our gate, not bound, not deleting."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if meta.get("deletionTimestamp") or spec.get("nodeName"):
        return False
    if labels(pod).get(names.ENABLED_LABEL) != "true":
        return False
    return any(g.get("name") == names.PLACEMENT_GATE for g in spec.get("schedulingGates") or [])


def is_replaceable_failure(pod: Mapping[str, Any]) -> bool:
    """A refused (Failed/ProvisionFailed) opted-in Pod that a controller owns: deleting it lets
    the owner create a fresh gated Pod, which skips the blocked candidate."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or labels(pod).get(names.ENABLED_LABEL) != "true":
        return False
    if status.get("phase") != FAILED_PHASE or status.get("reason") != names.REASON_PROVISION_FAILED:
        return False
    return any(ref.get("controller") is True for ref in meta.get("ownerReferences") or [])


def workload_request(pod: Mapping[str, Any]) -> WorkloadRequest:
    """Accelerator from the `nebula.io/accelerator` label (case-insensitive); count from the
    largest `nvidia.com/gpu` limit (else request) across containers. A type without a count
    means 1; a count without a type is an error, never silently CPU-only."""
    label = labels(pod).get(names.ACCELERATOR_LABEL)
    accelerator = label.strip().lower() if isinstance(label, str) and label.strip() else None
    count = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        raw = (resources.get("limits") or {}).get(GPU_RESOURCE, (resources.get("requests") or {}).get(GPU_RESOURCE))
        if raw is None:
            continue
        try:
            value = int(str(raw))
        except ValueError:
            raise RequestError(f"{GPU_RESOURCE} must be a whole number of GPUs, not {raw!r}") from None
        if value < 0:
            raise RequestError(f"{GPU_RESOURCE} must not be negative (got {value})")
        count = max(count, value)
    if accelerator is None:
        if count:
            raise RequestError(
                f"the Pod asks for {count} {GPU_RESOURCE} but has no {names.ACCELERATOR_LABEL} label; "
                "label it with the accelerator type, e.g. h100"
            )
        return WorkloadRequest(None, 0)
    return WorkloadRequest(accelerator, count or 1)
