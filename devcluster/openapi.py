"""OpenAPI v3 documents of the served CustomResourceDefinitions, for `kubectl explain`.

`Api` answers `/openapi/v3` (the index: one `serverRelativeURL` per group-version, with a
content hash kubectl caches by) and `/openapi/v3/apis/<group>/<version>` (that
group-version's kinds under `components.schemas`, each tagged
`x-kubernetes-group-version-kind` as kube-apiserver tags them). Built-in kinds are not
published; their group-versions are absent from the index, so clients fall back as they do
for any API without a document. Pure functions of the stored CRDs.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

CRDS_KEY = "apiextensions.k8s.io/customresourcedefinitions"
_STANDARD = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an object. Servers should "
    "convert recognized schemas to the latest internal value, and may reject unrecognized values.",
    "kind": "Kind is a string value representing the REST resource this object represents. Servers may infer "
    "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase.",
    "metadata": "Standard object's metadata.",
}

Obj = dict[str, Any]


def _served(crds: list[Obj]) -> dict[tuple[str, str], list[tuple[Obj, Obj]]]:
    """(group, version) -> [(crd spec, version entry)] for every served version."""
    found: dict[tuple[str, str], list[tuple[Obj, Obj]]] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        group = spec.get("group")
        for version in spec.get("versions") or []:
            if isinstance(group, str) and isinstance(version, dict) and version.get("served", True):
                found.setdefault((group, str(version.get("name"))), []).append((spec, version))
    return found


def _schema_name(group: str, version: str, kind: str) -> str:
    """kube-apiserver's definition name: the group reversed (`nebula.io` -> `io.nebula`)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def group_version_document(crds: list[Obj], group: str, version: str) -> Obj | None:
    """The OpenAPI 3.0 document of one group-version, or None when no CRD serves it."""
    entries = _served(crds).get((group, version))
    if not entries:
        return None
    schemas: dict[str, Obj] = {}
    paths: dict[str, Obj] = {}
    for spec, entry in entries:
        names = spec.get("names") or {}
        kind = str(names.get("kind", ""))
        list_kind = str(names.get("listKind") or f"{kind}List")
        name = _schema_name(group, version, kind)
        schema = copy.deepcopy((entry.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"})
        properties = schema.setdefault("properties", {})
        for field, description in _STANDARD.items():
            properties.setdefault(field, {"type": "object" if field == "metadata" else "string"})
            properties[field].setdefault("description", description)
        schema["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind, "version": version}]
        schemas[name] = schema
        schemas[_schema_name(group, version, list_kind)] = {
            "type": "object",
            "description": f"{list_kind} is a list of {kind}",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string", "description": _STANDARD["apiVersion"]},
                "kind": {"type": "string", "description": _STANDARD["kind"]},
                "metadata": {"type": "object", "description": "Standard list metadata."},
                "items": {
                    "type": "array",
                    "description": f"List of {names.get('plural', kind)}.",
                    "items": {"$ref": f"#/components/schemas/{name}"},
                },
            },
            "x-kubernetes-group-version-kind": [{"group": group, "kind": list_kind, "version": version}],
        }
        paths.update(_paths(spec, group, version, kind, list_kind))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _paths(spec: Obj, group: str, version: str, kind: str, list_kind: str) -> dict[str, Obj]:
    """The read-only operations (list, read) of one kind: where `kubectl explain` finds the
    kind of a resource. No write operations are published, so clients look no further for
    server-side field validation here than they did before there was a document."""
    plural = str((spec.get("names") or {}).get("plural", ""))
    base = f"/apis/{group}/{version}"
    scoped = f"{base}/namespaces/{{namespace}}/{plural}" if spec.get("scope", "Namespaced") == "Namespaced" else ""

    def get(action: str, of: str) -> Obj:
        ref = {"$ref": f"#/components/schemas/{_schema_name(group, version, of)}"}
        return {
            "get": {
                "operationId": f"{action}{kind}",
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": {"group": group, "kind": kind, "version": version},
            }
        }

    paths = {f"{base}/{plural}": get("list", list_kind)}
    if scoped:
        paths[scoped] = get("list", list_kind)
        paths[scoped + "/{name}"] = get("read", kind)
    else:
        paths[f"{base}/{plural}/{{name}}"] = get("read", kind)
    return paths


def _hash(document: Obj) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()


def index(crds: list[Obj]) -> Obj:
    """`/openapi/v3`: each served group-version and the URL of its document (hash included,
    so a changed CRD gets a new URL and kubectl's cache misses)."""
    paths = {}
    for group, version in sorted(_served(crds)):
        document = group_version_document(crds, group, version)
        assert document is not None
        url = f"/openapi/v3/apis/{group}/{version}?hash={_hash(document)}"
        paths[f"apis/{group}/{version}"] = {"serverRelativeURL": url}
    return {"paths": paths}
