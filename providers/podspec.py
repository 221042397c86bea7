"""Build the `PodSpec` a provider reads from a Pod in its JSON (API) form.

Called by the vnode before `provision`, and by tests. Takes a plain mapping, so
providers never depend on the Kubernetes client's model classes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from providers.base import PodSpec

ACCELERATOR_LABEL = "nebula.io/accelerator"
GPU_RESOURCE = "nvidia.com/gpu"

_SUFFIXES: dict[str, Decimal | int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(text: str | int | float) -> Decimal:
    """A Kubernetes resource quantity (`500m`, `2Gi`, `1e3`) as a Decimal."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from exc
    return number * Decimal(_SUFFIXES[match.group(2) or ""])


def _resource(resources: Mapping[str, Any], key: str) -> Decimal | None:
    for section in ("requests", "limits"):
        value = (resources.get(section) or {}).get(key)
        if value is not None:
            return parse_quantity(value)
    return None


def pod_spec_from_dict(pod: Mapping[str, Any]) -> PodSpec:
    """The provider's view of `pod` (first container). Raises ValueError if the Pod has
    no container or a malformed quantity."""
    meta = pod.get("metadata") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        raise ValueError("the Pod has no containers")
    first = containers[0]
    resources = first.get("resources") or {}
    cpu = _resource(resources, "cpu")
    memory = _resource(resources, "memory")
    gpu_limit = (resources.get("limits") or {}).get(GPU_RESOURCE)
    labels = dict(meta.get("labels") or {})
    accelerator = labels.get(ACCELERATOR_LABEL)
    return PodSpec(
        namespace=meta.get("namespace") or "default",
        name=meta.get("name") or "",
        uid=meta.get("uid") or "",
        container=first.get("name") or "",
        image=first.get("image") or "",
        command=tuple(first.get("command") or ()),
        args=tuple(first.get("args") or ()),
        working_dir=first.get("workingDir"),
        ports=tuple(int(p["containerPort"]) for p in first.get("ports") or () if "containerPort" in p),
        cpu=float(cpu) if cpu is not None else None,
        memory=int(memory) if memory is not None else None,
        accelerator=accelerator.lower() if accelerator else None,
        gpu_count=int(parse_quantity(gpu_limit)) if gpu_limit is not None else 0,
        labels=labels,
        annotations=dict(meta.get("annotations") or {}),
        stdin=bool(first.get("stdin")),
    )
