"""The `pods/{name}/ephemeralcontainers` subresource, as kube-apiserver's strategy serves it.

`resources.py` calls `merge_update` for a PUT or PATCH on the subresource (Pod objects in and
out: only `spec.ephemeralContainers` is taken from the request, the rest of the Pod stays as
stored) and `refuse_main_change` on updates of the Pod itself. Pure functions over dicts; they
raise `ApiError` (422 naming the field) and never touch the store.

Tests: tests/devcluster/test_ephemeral_subresource.py
"""

from __future__ import annotations

import copy
from typing import Any

from devcluster import kinds
from devcluster.errors import ApiError, Cause, duplicate, field_not_found, forbidden, invalid, invalid_value, required

SUBRESOURCE = "ephemeralcontainers"

# Container fields an ephemeral container may not set (kube-apiserver's
# validateEphemeralContainers): no ports and probes (it is not a service), no resources
# (the Pod's allocation is fixed), no lifecycle hooks, no per-container restart policy.
_FORBIDDEN_FIELDS = (
    "ports",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "resources",
    "resizePolicy",
    "restartPolicy",
)
_PATH = "spec.ephemeralContainers"


def validate_new_pod(pod: dict[str, Any]) -> None:
    """A Pod's create: the usual checks, and no ephemeral containers (they are added later,
    through the subresource, to a Pod that runs)."""
    kinds.validate_pod(pod)
    if (pod.get("spec") or {}).get("ephemeralContainers"):
        name = str(pod["metadata"].get("name", ""))
        raise _invalid(name, forbidden(_PATH, "cannot be set on create"))


def refuse_old_kind(body: Any) -> None:
    """kubectl 1.20 PUTs an `EphemeralContainers` object (the alpha API); a server from 1.22
    on no longer knows that kind and answers 400 with this message, which kubectl prints as
    `error: error updating ephemeral containers: ...`."""
    if isinstance(body, dict) and body.get("kind") == "EphemeralContainers":
        version = body.get("apiVersion") or "v1"
        raise ApiError(
            400,
            f'EphemeralContainers in version "{version}" cannot be handled as a Pod: no kind '
            f'"EphemeralContainers" is registered for version "{version}" in scheme '
            '"pkg/api/legacyscheme/scheme.go:30"',
            reason="BadRequest",
        )


def merge_update(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The stored Pod with the request's ephemeral containers, once they pass validation.

    Every other field of the request is ignored, as the real subresource strategy resets
    spec, status and metadata to the stored Pod's.
    """
    merged = copy.deepcopy(old)
    wanted = (new.get("spec") or {}).get("ephemeralContainers") or []
    name = str(old["metadata"].get("name", ""))
    validate(old, wanted, name=name)
    spec = merged.setdefault("spec", {})
    if wanted:
        spec["ephemeralContainers"] = copy.deepcopy(wanted)
    else:
        spec.pop("ephemeralContainers", None)
    return merged


def validate(old: dict[str, Any], wanted: Any, *, name: str) -> None:
    """Append-only, unique names, only the fields an ephemeral container may have."""
    if not isinstance(wanted, list):
        raise _invalid(name, invalid_value(_PATH, None, "must be a list"))
    spec = old.get("spec") or {}
    existing = {str(c.get("name")): c for c in spec.get("ephemeralContainers") or [] if isinstance(c, dict)}
    given = {str(c.get("name")): c for c in wanted if isinstance(c, dict)}
    for ec_name in existing:
        if ec_name not in given:
            raise _invalid(name, forbidden(_PATH, f'existing ephemeral containers "{ec_name}" may not be removed'))
    regular = [
        str(c.get("name"))
        for group in ("initContainers", "containers")
        for c in spec.get(group) or []
        if isinstance(c, dict)
    ]
    seen: set[str] = set(regular)
    for i, container in enumerate(wanted):
        path = f"{_PATH}[{i}]"
        if not isinstance(container, dict):
            raise _invalid(name, invalid_value(path, None, "must be an object"))
        ec_name = str(container.get("name") or "")
        if ec_name in existing:
            if _without_defaults(container) != _without_defaults(existing[ec_name]):
                raise _invalid(name, forbidden(path, f'existing ephemeral containers "{ec_name}" may not be changed'))
            seen.add(ec_name)
            continue
        _validate_new(container, path, name=name, seen=seen, regular=regular)
        seen.add(ec_name)


def _validate_new(container: dict[str, Any], path: str, *, name: str, seen: set[str], regular: list[str]) -> None:
    ec_name = container.get("name")
    if not ec_name:
        raise _invalid(name, required(f"{path}.name"))
    if ec_name in seen:
        raise _invalid(name, duplicate(f"{path}.name", ec_name))
    if not container.get("image"):
        raise _invalid(name, required(f"{path}.image"))
    for field in _FORBIDDEN_FIELDS:
        value = container.get(field)
        if value not in (None, {}, []):
            raise _invalid(name, forbidden(f"{path}.{field}", "cannot be set for an Ephemeral Container"))
    target = container.get("targetContainerName")
    if target and target not in regular:
        raise _invalid(name, field_not_found(f"{path}.targetContainerName", target))


def _without_defaults(container: dict[str, Any]) -> dict[str, Any]:
    """Compare what the client wrote: defaulted fields may be absent from a PUT body."""
    return {k: v for k, v in container.items() if v not in (None, {}, [], "")} | {
        k: None for k in ("terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "resources")
    }


def _invalid(name: str, cause: Cause) -> ApiError:
    return invalid("Pod", name, [cause])


def refuse_main_change(old: dict[str, Any], new: dict[str, Any]) -> None:
    """An update of the Pod itself may not touch its ephemeral containers."""
    before = (old.get("spec") or {}).get("ephemeralContainers") or []
    after = (new.get("spec") or {}).get("ephemeralContainers") or []
    if before != after:
        detail = f"pod updates may not change ephemeral containers; use the {SUBRESOURCE} subresource"
        raise _invalid(str(old["metadata"].get("name", "")), forbidden(_PATH, detail))
