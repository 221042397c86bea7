"""Schema validation of rendered manifests without a cluster.

Kubernetes kinds are checked against the OpenAPI models the `kubernetes` client ships: the
model's `from_dict` checks types and required fields, and `unknown_fields` walks the same
models to reject fields they do not define (the API server's strict field validation).
cert-manager's kinds, whose CRDs are not here, are checked against the structural subset of
their v1 schema that Nebula uses. Used by tests/deploy/test_manifests.py; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kubernetes import client

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")


def model_for(api_version: str, kind: str) -> Any:
    """The generated model class of `apiVersion`/`kind` (V1Deployment), or None."""
    version = api_version.rsplit("/", 1)[-1]
    prefix = version[:1].upper() + version[1:]
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else "core"
    group_prefix = group.split(".")[0].capitalize()
    for name in (f"{prefix}{kind}", f"{group_prefix}{prefix}{kind}"):
        model = getattr(client, name, None)
        if model is not None and hasattr(model, "openapi_types"):
            return model
    return None


def unknown_fields(data: Any, type_name: str, path: str = "") -> list[str]:
    """Paths of keys in `data` that the model named `type_name` does not define."""
    match = _LIST.match(type_name)
    if match:
        items = data if isinstance(data, list) else []
        return [e for i, item in enumerate(items) for e in unknown_fields(item, match.group(1), f"{path}[{i}]")]
    match = _DICT.match(type_name)
    if match:
        values = data.items() if isinstance(data, Mapping) else []
        return [e for key, value in values for e in unknown_fields(value, match.group(1), f"{path}.{key}")]
    model = getattr(client, type_name, None)
    if model is None or not hasattr(model, "openapi_types") or not isinstance(data, Mapping):
        return []  # a primitive or free-form `object`: the model's own validation types it
    by_json_name = {json_name: attr for attr, json_name in model.attribute_map.items()}
    errors = []
    for key, value in data.items():
        attr = by_json_name.get(key)
        if attr is None:
            errors.append(f"{path}.{key}".lstrip("."))
        else:
            errors += unknown_fields(value, model.openapi_types[attr], f"{path}.{key}")
    return errors


def validate_builtin(obj: Mapping[str, Any]) -> list[str]:
    """Problems with a built-in kind; empty when the client's model accepts it strictly."""
    model = model_for(str(obj.get("apiVersion")), str(obj.get("kind")))
    if model is None:
        return [f"no model in the kubernetes client for {obj.get('apiVersion')} {obj.get('kind')}"]
    problems = [f"unknown field {path}" for path in unknown_fields(obj, model.__name__)]
    try:
        model.from_dict(dict(obj))
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        problems.append(str(exc))
    return problems


# -- cert-manager v1, the structural subset Nebula uses (cert-manager.io/docs/reference/api-docs)
Schema = Mapping[str, Any]

_STR: Schema = {"type": "string"}
_STRINGS: Schema = {"type": "array", "items": _STR}
_META: Schema = {"type": "object", "required": ["name", "namespace"], "open": True}
_ISSUER_REF: Schema = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _STR, "kind": {"type": "string", "enum": ["Issuer", "ClusterIssuer"]}, "group": _STR},
}
_CERTIFICATE_SPEC: Schema = {
    "type": "object",
    "required": ["secretName", "issuerRef"],
    "properties": {
        "secretName": _STR,
        "issuerRef": _ISSUER_REF,
        "commonName": _STR,
        "dnsNames": _STRINGS,
        "ipAddresses": _STRINGS,
        "uris": _STRINGS,
        "duration": {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$"},
        "renewBefore": {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$"},
        "isCA": {"type": "boolean"},
        "usages": _STRINGS,
        "privateKey": {
            "type": "object",
            "properties": {
                "algorithm": {"type": "string", "enum": ["RSA", "ECDSA", "Ed25519"]},
                "encoding": {"type": "string", "enum": ["PKCS1", "PKCS8"]},
                "size": {"type": "integer"},
                "rotationPolicy": {"type": "string", "enum": ["Never", "Always"]},
            },
        },
    },
}
_ISSUER_SPEC: Schema = {
    "type": "object",
    "one_of": ["selfSigned", "ca", "acme", "vault", "venafi"],
    "properties": {
        "selfSigned": {"type": "object", "properties": {"crlDistributionPoints": _STRINGS}},
        "ca": {"type": "object", "required": ["secretName"], "properties": {"secretName": _STR}},
        "acme": {"type": "object", "open": True},
        "vault": {"type": "object", "open": True},
        "venafi": {"type": "object", "open": True},
    },
}
CERT_MANAGER: dict[tuple[str, str], Schema] = {
    ("cert-manager.io/v1", "Certificate"): _CERTIFICATE_SPEC,
    ("cert-manager.io/v1", "Issuer"): _ISSUER_SPEC,
}


def validate_cert_manager(obj: Mapping[str, Any]) -> list[str]:
    spec_schema = CERT_MANAGER.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    if spec_schema is None:
        return [f"no structural schema for {obj.get('apiVersion')} {obj.get('kind')}"]
    top: Schema = {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": _STR, "kind": _STR, "metadata": _META, "spec": spec_schema},
    }
    return structural_errors(obj, top, "")


_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "object": Mapping,
    "array": list,
}


def structural_errors(value: Any, schema: Schema, path: str) -> list[str]:
    """A structural schema's checks: type, required, enum, pattern, unknown properties
    (unless `open`), and `one_of` (exactly one of these properties is set)."""
    expected = _TYPES[schema["type"]]
    if not isinstance(value, expected) or (schema["type"] == "integer" and isinstance(value, bool)):
        return [f"{path or '.'}: expected {schema['type']}, got {type(value).__name__}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "pattern" in schema and not re.fullmatch(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if schema["type"] == "array":
        for i, item in enumerate(value):
            errors += structural_errors(item, schema["items"], f"{path}[{i}]")
    if schema["type"] == "object":
        errors += [f"{path}.{key}: required" for key in schema.get("required", []) if key not in value]
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                errors += structural_errors(item, properties[key], f"{path}.{key}")
            elif not schema.get("open"):
                errors.append(f"{path}.{key}: unknown field")
        if "one_of" in schema and sum(key in value for key in schema["one_of"]) != 1:
            errors.append(f"{path}: exactly one of {schema['one_of']} must be set")
    return errors
