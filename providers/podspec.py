"""The one reader of what a Pod asks for: accelerator, GPU count, tier, cpu, memory, ports.

`pod_spec_from_dict` builds the `PodSpec` a provider provisions from (the vnode calls it
before `provision`); placement builds its WorkloadRequest from the same PodSpec, so the
two can never read one Pod differently. Takes the Pod's JSON (API) form as a plain mapping,
so providers never depend on the Kubernetes client's models; never reads a Pod's status.

Invariant (one reader): placement, the provider and the blocklist scope agree on a Pod; see
tests/placement/test_one_reader.py::test_placement_the_provider_and_the_blocklist_read_one_pod_alike.

The rules, as the API server and kubelet compute a Pod's effective request, are tabled in
tests/providers/test_podspec_rules.py::test_effective_request_follows_kubernetes:

- A container's request of a resource is `requests[r]`, else `limits[r]` (the API server
  defaults a missing request to the limit; for `nvidia.com/gpu` it allows no other value).
- A Pod's effective request is the larger of (a) the sum over its app containers plus its
  sidecars (init containers with `restartPolicy: Always`) and (b) for each ordinary init
  container, its request plus the sidecars started before it. `spec.overhead` is ignored.
- `nebula.io/accelerator` is folded (surrounding white space, case); blank means none. The
  GPU count must be a whole, non-negative number; a type without a count means 1 GPU; a
  count without a type is a ValueError, never silently CPU-only.
- The tier (`requested_tier`) is the `nebula.io/capacity-type` annotation read by `Tier.parse`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from providers import base
from providers.shape import ContainerSpec, Mount

ACCELERATOR_LABEL = "nebula.io/accelerator"
CAPACITY_TYPE_ANNOTATION = "nebula.io/capacity-type"
GPU_RESOURCE = "nvidia.com/gpu"
SIDECAR_RESTART_POLICY = "Always"

_SUFFIXES: dict[str, Decimal | int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")

Container = Mapping[str, Any]


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


def container_request(container: Container, resource: str) -> Decimal | None:
    """One container's request of `resource`: its request, else its limit, else None."""
    resources = container.get("resources") or {}
    for section in ("requests", "limits"):
        value = (resources.get(section) or {}).get(resource)
        if value is not None:
            try:
                return parse_quantity(value)
            except ValueError as exc:
                raise ValueError(f"container {container.get('name')!r} resources.{section}.{resource}: {exc}") from None
    return None


def effective_request(spec: Mapping[str, Any], resource: str) -> Decimal | None:
    """The Pod's effective request of `resource` (the rule in the module docstring), or None
    when no container names it."""
    named = False
    sidecars = Decimal(0)
    init_peak = Decimal(0)
    for init in spec.get("initContainers") or ():
        value = container_request(init, resource)
        named = named or value is not None
        if init.get("restartPolicy") == SIDECAR_RESTART_POLICY:
            sidecars += value or 0
        else:
            init_peak = max(init_peak, (value or 0) + sidecars)
    apps = _requests(spec.get("containers") or (), resource)
    named = named or any(value is not None for value in apps)
    if not named:
        return None
    return max(sum((value or Decimal(0) for value in apps), Decimal(0)) + sidecars, init_peak)


def _requests(containers: Iterable[Container], resource: str) -> list[Decimal | None]:
    return [container_request(container, resource) for container in containers]


def accelerator_of(labels: Mapping[str, str]) -> str | None:
    """The `nebula.io/accelerator` label folded (white space stripped, lower-cased); None if blank."""
    label = labels.get(ACCELERATOR_LABEL)
    folded = label.strip().lower() if isinstance(label, str) else ""
    return folded or None


def gpu_count_of(spec: Mapping[str, Any], accelerator: str | None) -> int:
    """GPUs the Pod asks for. ValueError (naming the field) for a fraction, a negative count, or a
    count without an accelerator; an accelerator without a count means 1."""
    for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        _check_whole_gpus(container)
    quantity = effective_request(spec, GPU_RESOURCE)
    count = int(quantity) if quantity is not None else 0
    if accelerator is None:
        if count:
            raise ValueError(
                f"the Pod asks for {count} {GPU_RESOURCE} but has no {ACCELERATOR_LABEL} label; "
                "label it with the accelerator type, e.g. h100"
            )
        return 0
    return count or 1


def _check_whole_gpus(container: Container) -> None:
    resources = container.get("resources") or {}
    for section in ("requests", "limits"):
        raw = (resources.get(section) or {}).get(GPU_RESOURCE)
        if raw is None:
            continue
        try:
            value = parse_quantity(raw)
        except ValueError:
            raise ValueError(f"{GPU_RESOURCE} must be a whole number of GPUs, not {raw!r}") from None
        if value < 0:
            raise ValueError(f"{GPU_RESOURCE} must not be negative (got {raw!r})")
        if value != value.to_integral_value():
            raise ValueError(f"{GPU_RESOURCE} must be a whole number of GPUs, not {raw!r}")


def requested_tier(pod: Mapping[str, Any]) -> base.Tier | None:
    """The tier the Pod's `nebula.io/capacity-type` annotation names (any spelling
    `Tier.parse` reads), or None."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return base.Tier.parse(annotations.get(CAPACITY_TYPE_ANNOTATION))


def container_spec(container: Container, *, init: bool = False) -> ContainerSpec:
    """One container's program and mounts as a provider runs it (`init`: from `initContainers`)."""
    mounts = tuple(
        Mount(
            volume=str(mount.get("name") or ""),
            path=str(mount.get("mountPath") or ""),
            sub_path=str(mount.get("subPath") or ""),
            read_only=bool(mount.get("readOnly")),
        )
        for mount in container.get("volumeMounts") or ()
    )
    return ContainerSpec(
        name=str(container.get("name") or ""),
        image=str(container.get("image") or ""),
        command=tuple(str(part) for part in container.get("command") or ()),
        args=tuple(str(part) for part in container.get("args") or ()),
        working_dir=container.get("workingDir") or None,
        ports=tuple(int(p["containerPort"]) for p in container.get("ports") or () if "containerPort" in p),
        stdin=bool(container.get("stdin")),
        tty=bool(container.get("tty")),
        mounts=mounts,
        sidecar=init and container.get("restartPolicy") == SIDECAR_RESTART_POLICY,
    )


def pod_spec_from_dict(pod: Mapping[str, Any]) -> base.PodSpec:
    """The provider's view of `pod`: identity, its containers' programs (the first app
    container's also in the first-container fields), the Pod's effective resources. Raises
    ValueError (naming the field) if the Pod has no container,
    a malformed quantity, or a GPU count the rules above refuse."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        raise ValueError("the Pod has no containers")
    first = containers[0]
    labels = dict(meta.get("labels") or {})
    accelerator = accelerator_of(labels)
    cpu = effective_request(spec, "cpu")
    memory = effective_request(spec, "memory")
    return base.PodSpec(
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
        accelerator=accelerator,
        gpu_count=gpu_count_of(spec, accelerator),
        labels=labels,
        annotations=dict(meta.get("annotations") or {}),
        stdin=bool(first.get("stdin")),
        containers=tuple(container_spec(container) for container in containers),
        init_containers=tuple(container_spec(init, init=True) for init in spec.get("initContainers") or ()),
        restart_policy=str(spec.get("restartPolicy") or "Always"),
        active_deadline_seconds=deadline_of(spec),
        termination_grace_seconds=grace_of(spec),
    )


def grace_of(spec: Mapping[str, Any]) -> float | None:
    """`spec.terminationGracePeriodSeconds` (0 or more), or None when unset or not a number."""
    value = spec.get("terminationGracePeriodSeconds")
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def deadline_of(spec: Mapping[str, Any]) -> int | None:
    """`spec.activeDeadlineSeconds`, or None; ValueError naming it unless a positive integer
    (as the API server validates it)."""
    value = spec.get("activeDeadlineSeconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"spec.activeDeadlineSeconds: must be a positive integer, not {value!r}")
    return int(value)
