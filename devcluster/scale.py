"""The `scale` subresource of Deployments and ReplicaSets: an autoscaling/v1 Scale read from,
and written to, the parent's `spec.replicas` (what `kubectl scale` and an HPA use).

`api.py` calls `handle` for GET, PUT and PATCH of `<plural>/<name>/scale`; writes go through
`Resources.replace` on the parent under the store lock, so resourceVersion conflicts and the
generation bump are the parent's. Never writes anything but `spec.replicas`.
Tests: tests/devcluster/test_scale.py::test_kubectl_scale_deploy_runs_three_pods.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from devcluster import patch
from devcluster.errors import ApiError, Cause, bad_request, invalid, invalid_value
from devcluster.registry import ResourceType
from devcluster.resources import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, Resources, load_json

SUBRESOURCE = "scale"
GROUP, VERSION, KIND = "autoscaling", "v1", "Scale"
Obj = dict[str, Any]


def serves(rt: ResourceType) -> bool:
    return rt.builtin and rt.group == "apps" and rt.plural in ("deployments", "replicasets")


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector as labels.Selector.String() writes it: requirements sorted by key
    (`app=web,tier in (a,b)`), set values sorted; `key` for Exists, `!key` for DoesNotExist."""
    terms: list[tuple[str, str]] = []
    for key, value in ((selector or {}).get("matchLabels") or {}).items():
        terms.append((str(key), f"{key}={value}"))
    for expression in (selector or {}).get("matchExpressions") or []:
        key, operator = str(expression.get("key", "")), expression.get("operator")
        values = ",".join(sorted(str(v) for v in expression.get("values") or []))
        if operator == "In":
            terms.append((key, f"{key} in ({values})"))
        elif operator == "NotIn":
            terms.append((key, f"{key} notin ({values})"))
        elif operator == "Exists":
            terms.append((key, key))
        elif operator == "DoesNotExist":
            terms.append((key, f"!{key}"))
    return ",".join(text for _, text in sorted(terms, key=lambda term: term[0]))


def to_scale(obj: Mapping[str, Any]) -> Obj:
    """The Scale of a Deployment or ReplicaSet, with the parent's identity and resourceVersion."""
    meta = obj.get("metadata") or {}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {
        "kind": KIND,
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"replicas": int(spec.get("replicas", 1))},
        "status": {"replicas": int(status.get("replicas", 0)), "selector": selector_string(spec.get("selector"))},
    }


def handle(
    resources: Resources,
    rt: ResourceType,
    namespace: str,
    name: str,
    *,
    method: str,
    content_type: str,
    body: Any,
    dry_run: bool = False,
) -> Obj:
    """GET returns the Scale; PUT (a decoded Scale) or PATCH (raw bytes of `content_type`)
    sets the parent's replicas and returns the new Scale. 404 for a missing parent, 409 for a
    stale resourceVersion, 422 for replicas that are not a non-negative integer."""
    with resources.store.lock:
        parent = resources.get(rt, namespace, name)
        current = to_scale(parent)
        if method == "GET":
            return current
        wanted = body if method == "PUT" else _patched(current, content_type, body)
        replicas = _checked_replicas(name, wanted)
        meta = wanted.get("metadata") or {}
        if meta.get("name", name) != name:
            raise bad_request("the name of the object does not match the name on the URL")
        updated = copy.deepcopy(parent)
        updated.setdefault("spec", {})["replicas"] = replicas
        updated["metadata"]["resourceVersion"] = meta.get("resourceVersion") or parent["metadata"]["resourceVersion"]
        return to_scale(resources.replace(rt, namespace, name, updated, dry_run=dry_run))


def _patched(current: Obj, content_type: str, raw: Any) -> Obj:
    document = load_json(raw if isinstance(raw, bytes) else b"null")
    try:
        if content_type == MERGE_PATCH:
            result = patch.json_merge_patch(current, document)
        elif content_type == STRATEGIC_PATCH and isinstance(document, dict):
            result = patch.strategic_merge_patch(current, document, KIND)
        elif content_type == JSON_PATCH and isinstance(document, list):
            result = patch.json_patch(current, document)
        else:
            raise ApiError(415, f"the media type {content_type!r} is not supported for PATCH of {SUBRESOURCE}")
    except patch.PatchError as err:
        raise invalid(KIND, current["metadata"].get("name", ""), [Cause("", "FieldValueInvalid", str(err))]) from None
    if not isinstance(result, dict):
        raise bad_request("the patched Scale is not an object")
    return result


def _checked_replicas(name: str, scale: Any) -> int:
    if not isinstance(scale, dict):
        raise bad_request(f"the body of the request must be a {KIND} object")
    if scale.get("kind") not in (None, "", KIND):
        raise bad_request(f"the kind in the request body ({scale['kind']}) does not match the resource ({KIND})")
    replicas = (scale.get("spec") or {}).get("replicas", 0)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        cause = invalid_value("spec.replicas", replicas, "must be greater than or equal to 0")
        raise invalid(KIND, name, [cause], group=GROUP)
    return replicas
