"""The one check of a Pod's shape against what a provider serves (design I9).

`needs(pod)` lists what a Pod asks of its provider beyond one plain container, each with the
field that asks it (`spec.initContainers[0]`, `spec.volumes[2].persistentVolumeClaim`);
`unserved(pod, shapes)` keeps those a provider's `Shapes` does not serve. Admission
(warnings, or a denial when no provider of the Pod's pool serves it), placement (a skipped
candidate, named in the Event) and the vnode's `create_pod` (Failed `UnsupportedPodSpec`)
all call it, so the three can never disagree. Pure; reads the Pod's JSON form.
Table: tests/providers/test_shapecheck.py::test_each_field_a_provider_cannot_serve_is_named.

Nobody serves `postStart` hooks, `grpc` probes, `subPathExpr` mounts, or volume kinds outside
`shape.VOLUME_KINDS`. The service-account token volume the API server adds to every Pod
(`kube-api-access-*`) is a warning only: it is not mounted on external compute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from providers.shape import PROBE_KINDS, VOLUME_KINDS, Shapes

SERVICE_ACCOUNT_VOLUME_PREFIX = "kube-api-access-"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
_PROJECTED_SOURCES = ("configMap", "secret", "downwardAPI")
SEVERAL, INIT, SIDECARS, PROBE, VOLUME = "several", "init", "sidecars", "probe", "volume"  # Need.asks


@dataclass(frozen=True)
class Need:
    """One thing a Pod asks of its provider: the feature (in words) and the field asking it.
    `warn_only`: said to the user, never a refusal."""

    feature: str
    field: str
    warn_only: bool = False
    # What in `Shapes` serves it: (SEVERAL | INIT | SIDECARS, ""), (PROBE, kind), (VOLUME, kind);
    # ("", "") for what nothing serves (postStart hooks, subPathExpr, other projected sources, warn-only).
    asks: tuple[str, str] = ("", "")

    def text(self) -> str:
        return f"{self.field} ({self.feature})"


def needs(pod: Mapping[str, Any]) -> tuple[Need, ...]:
    """Everything `pod` asks beyond one plain container, in field order."""
    spec = pod.get("spec") or {}
    found: list[Need] = []
    containers = list(spec.get("containers") or ())
    if len(containers) > 1:
        found.append(Need("several containers", "spec.containers[1]", asks=(SEVERAL, "")))
    for index, init in enumerate(spec.get("initContainers") or ()):
        where = f"spec.initContainers[{index}]"
        if init.get("restartPolicy") == "Always":
            found.append(Need("sidecar containers", f"{where}.restartPolicy", asks=(SIDECARS, "")))
        else:
            found.append(Need("init containers", where, asks=(INIT, "")))
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or ()):
            found += _container_needs(container, f"spec.{section}[{index}]")
    for index, volume in enumerate(spec.get("volumes") or ()):
        found += _volume_needs(volume, f"spec.volumes[{index}]")
    return tuple(found)


def _container_needs(container: Mapping[str, Any], where: str) -> list[Need]:
    found: list[Need] = []
    for probe in PROBES:
        handler = container.get(probe)
        if not isinstance(handler, Mapping):
            continue
        kind = next((key for key in (*PROBE_KINDS, "grpc") if key in handler), "")
        field = f"{where}.{probe}" + (f".{kind}" if kind else "")
        found.append(Need(f"{kind or 'empty'} probes", field, asks=(PROBE, kind) if kind in PROBE_KINDS else ("", "")))
    # `preStop` is served by the vnode on every provider (vnode.phases.stopping); `postStart` by none.
    if "postStart" in (container.get("lifecycle") or {}):
        found.append(Need("postStart hooks", f"{where}.lifecycle.postStart"))
    for index, mount in enumerate(container.get("volumeMounts") or ()):
        if mount.get("subPathExpr"):
            found.append(Need("subPathExpr mounts", f"{where}.volumeMounts[{index}].subPathExpr"))
    return found


def volume_kind(volume: Mapping[str, Any]) -> str:
    """The volume's source kind (`configMap`, `persistentVolumeClaim`, ...); "" if none is set."""
    return next((key for key in volume if key != "name"), "")


def _volume_needs(volume: Mapping[str, Any], where: str) -> list[Need]:
    kind = volume_kind(volume)
    if str(volume.get("name") or "").startswith(SERVICE_ACCOUNT_VOLUME_PREFIX) and kind == "projected":
        return [Need("the service account token (not mounted on external compute)", f"{where}", warn_only=True)]
    asks = (VOLUME, kind) if kind in VOLUME_KINDS else ("", "")
    found = [Need(f"{kind or 'empty'} volumes", f"{where}.{kind}" if kind else where, asks=asks)]
    if kind == "projected":
        for index, source in enumerate((volume.get("projected") or {}).get("sources") or ()):
            for key in source:
                if key not in _PROJECTED_SOURCES:
                    found.append(Need(f"projected {key} sources", f"{where}.projected.sources[{index}].{key}"))
    return found


def _serves(shapes: Shapes, need: Need) -> bool:
    what, kind = need.asks
    if what == SEVERAL:
        return shapes.several_containers
    if what == INIT:
        return shapes.init_containers
    if what == SIDECARS:
        return shapes.sidecars
    if what == PROBE:
        return kind in shapes.probes
    if what == VOLUME:
        return kind in shapes.volumes
    return False  # postStart hooks, subPathExpr, grpc probes, other volume kinds and sources, warn-only needs


def unserved(pod: Mapping[str, Any], shapes: Shapes) -> tuple[Need, ...]:
    """The needs of `pod` that `shapes` does not serve."""
    return not_served(needs(pod), shapes)


def not_served(found: Iterable[Need], shapes: Shapes) -> tuple[Need, ...]:
    """The needs among `found` (from `needs`) that `shapes` does not serve."""
    return tuple(need for need in found if not _serves(shapes, need))


def refusals(unserved_needs: Iterable[Need]) -> tuple[Need, ...]:
    """The needs that refuse the Pod (warn-only ones dropped)."""
    return tuple(need for need in unserved_needs if not need.warn_only)


def describe(unserved_needs: Iterable[Need]) -> str:
    """`spec.volumes[0].persistentVolumeClaim (persistentVolumeClaim volumes), ...`"""
    return ", ".join(need.text() for need in unserved_needs)


def refusal_message(provider: str, unserved_needs: Sequence[Need]) -> str:
    """The Failed reason's message for a Pod bound to `provider` that it cannot serve."""
    return f"provider {provider!r} cannot serve {describe(refusals(unserved_needs))}"
