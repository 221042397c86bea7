"""Structural defaulting of custom resources: the `default:` values of a CRD version's
openAPIV3Schema, applied as kube-apiextensions-server applies them.

`Resources` calls `apply_to` on create and update (the request's version); the read paths
(`Resources.get`, the API's lists, watch events) call `defaulted`, so objects stored before a
default was added read with it, as the real server defaults what it reads from etcd. Defaults
never touch `metadata`, `apiVersion` or `kind`; nothing here writes the store.
Tests: tests/devcluster/test_crd_defaults.py::test_nodepool_strategy_column_shows_the_default.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from devcluster.registry import ResourceType
from devcluster.store import Store

CRDS = "apiextensions.k8s.io/customresourcedefinitions"
Schema = Mapping[str, Any]
_UNDEFAULTED = ("metadata", "apiVersion", "kind")


def schema_of(store: Store, rt: ResourceType) -> Schema | None:
    """The openAPIV3Schema of the CRD version `rt` serves, when it declares any default."""
    if rt.builtin:
        return None
    crd = store.get(CRDS, "", f"{rt.plural}.{rt.group}")
    for version in ((crd or {}).get("spec") or {}).get("versions") or []:
        if isinstance(version, dict) and version.get("name") == rt.version:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            return schema if isinstance(schema, Mapping) and _has_default(schema) else None
    return None


def _has_default(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return "default" in schema or any(_has_default(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_default(v) for v in schema)
    return False


def apply(schema: Schema, value: Any, *, top: bool = False) -> None:
    """Default `value` in place by `schema` (structural.Default): a missing property with a
    `default` gets a copy of it, a null one that is not `nullable` is dropped first (and then
    defaulted); then every property, array item and additionalProperties value is walked,
    the ones just defaulted included."""
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, prop in properties.items():
            if top and key in _UNDEFAULTED or not isinstance(prop, Mapping):
                continue
            if key in value and value[key] is None and not prop.get("nullable"):
                del value[key]
            if key not in value and "default" in prop:
                value[key] = copy.deepcopy(prop["default"])
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if top and key in _UNDEFAULTED:
                continue
            if isinstance(properties.get(key), Mapping):
                apply(properties[key], item)
            elif isinstance(extra, Mapping):
                apply(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            apply(schema["items"], item)


def apply_to(store: Store, rt: ResourceType, obj: dict[str, Any]) -> None:
    """Default a custom resource in place (a write: create, update, patch, apply)."""
    schema = schema_of(store, rt)
    if schema is not None:
        apply(schema, obj, top=True)


def defaulted(schema: Schema | None, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as read with its defaults: the same object when nothing changes, else a copy."""
    if schema is None:
        return obj
    result = copy.deepcopy(obj)
    apply(schema, result, top=True)
    return obj if result == obj else result
