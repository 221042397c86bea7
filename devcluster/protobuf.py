"""Decoding the Kubernetes protobuf envelope for the few kinds kubectl 1.32+ create in protobuf
(and the TokenRequest, access reviews and RBAC objects of `kubectl create token`, `kubectl auth
can-i` and `kubectl create (cluster)role(binding)`).

The HTTP layer calls `decode_object` for `application/vnd.kubernetes.protobuf` bodies and
stores the resulting JSON-form dict. A hand-written wire-format reader: every length is
checked against the buffer, slices are memoryviews (no copies beyond the decoded values),
and any malformed input raises `ProtobufError`, never anything else.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from devcluster import jobproto

MAGIC = b"k8s\x00"
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class ProtobufError(ValueError):
    """A body that is not a decodable Kubernetes protobuf object (the caller answers 400/415)."""


Fields = dict[int, list[Any]]


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 70:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result >= 1 << 64:
                raise ProtobufError("varint overflows 64 bits")
            return result, pos
        shift += 7
    raise ProtobufError("varint longer than 10 bytes")


def _fields(buf: memoryview) -> Fields:
    """All fields of one message: number -> values (ints for varints, memoryviews for bytes)."""
    fields: Fields = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        value: Any
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _BYTES:
            length, pos = _varint(buf, pos)
            if length > len(buf) - pos:
                raise ProtobufError(f"field {number} claims {length} bytes, {len(buf) - pos} remain")
            value, pos = buf[pos : pos + length], pos + length
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if size > len(buf) - pos:
                raise ProtobufError(f"truncated fixed-width field {number}")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        fields.setdefault(number, []).append((wire, value))
    return fields


def _last(fields: Fields, number: int, wire: int) -> Any:
    values = fields.get(number)
    if not values:
        return None
    found_wire, value = values[-1]
    if found_wire != wire:
        raise ProtobufError(f"field {number} has wire type {found_wire}, expected {wire}")
    return value


def _all(fields: Fields, number: int, wire: int) -> list[Any]:
    values = fields.get(number) or []
    if any(found != wire for found, _ in values):
        raise ProtobufError(f"field {number} has the wrong wire type")
    return [value for _, value in values]


def _text(raw: memoryview) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtobufError("string field is not valid UTF-8") from exc


def _string(fields: Fields, number: int) -> str:
    raw = _last(fields, number, _BYTES)
    return _text(raw) if raw is not None else ""


def _int64(fields: Fields, number: int) -> int | None:
    value = _last(fields, number, _VARINT)
    if value is None:
        return None
    return int(value) - (1 << 64) if value >= 1 << 63 else int(value)


def _bool(fields: Fields, number: int) -> bool | None:
    value = _last(fields, number, _VARINT)
    return None if value is None else bool(value)


def _map(fields: Fields, number: int, value_of: Callable[[memoryview], Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for entry in _all(fields, number, _BYTES):
        entry_fields = _fields(entry)
        value = _last(entry_fields, 2, _BYTES)
        result[_string(entry_fields, 1)] = value_of(value if value is not None else memoryview(b""))
    return result


def _b64(raw: memoryview) -> str:
    return base64.b64encode(raw).decode("ascii")


def _time(raw: memoryview | None) -> str | None:
    if raw is None:
        return None
    fields = _fields(raw)
    seconds = _int64(fields, 1) or 0
    if seconds == 0:
        return None  # Go's zero time: serialised as null, i.e. "not set"
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError) as exc:
        raise ProtobufError(f"timestamp {seconds} out of range") from exc


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    """Go's omitempty: empty strings, maps, lists and None are left out."""
    if value not in ("", None, {}, []):
        target[key] = value


def _object_meta(raw: memoryview | None) -> dict[str, Any]:
    if raw is None:
        return {}
    f = _fields(raw)
    meta: dict[str, Any] = {}
    for number, key in ((1, "name"), (2, "generateName"), (3, "namespace"), (4, "selfLink")):
        _put(meta, key, _string(f, number))
    for number, key in ((5, "uid"), (6, "resourceVersion")):
        _put(meta, key, _string(f, number))
    if generation := _int64(f, 7):
        meta["generation"] = generation
    _put(meta, "creationTimestamp", _time(_last(f, 8, _BYTES)))
    _put(meta, "deletionTimestamp", _time(_last(f, 9, _BYTES)))
    _put(meta, "deletionGracePeriodSeconds", _int64(f, 10))
    _put(meta, "labels", _map(f, 11, _text))
    _put(meta, "annotations", _map(f, 12, _text))
    _put(meta, "ownerReferences", [_owner_reference(r) for r in _all(f, 13, _BYTES)])
    _put(meta, "finalizers", [_text(v) for v in _all(f, 14, _BYTES)])
    return meta


def _owner_reference(raw: memoryview) -> dict[str, Any]:
    f = _fields(raw)
    ref: dict[str, Any] = {}
    for number, key in ((5, "apiVersion"), (1, "kind"), (3, "name"), (4, "uid")):
        ref[key] = _string(f, number)
    _put(ref, "controller", _bool(f, 6))
    _put(ref, "blockOwnerDeletion", _bool(f, 7))
    return ref


def _secret(f: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    _put(obj, "data", _map(f, 2, _b64))
    _put(obj, "type", _string(f, 3))
    _put(obj, "stringData", _map(f, 4, _text))
    _put(obj, "immutable", _bool(f, 5))
    return obj


def _configmap(f: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    _put(obj, "data", _map(f, 2, _text))
    _put(obj, "binaryData", _map(f, 3, _b64))
    _put(obj, "immutable", _bool(f, 4))
    return obj


def _namespace(f: Fields) -> dict[str, Any]:
    spec_raw, status_raw = _last(f, 2, _BYTES), _last(f, 3, _BYTES)
    spec: dict[str, Any] = {}
    if spec_raw is not None:
        _put(spec, "finalizers", [_text(v) for v in _all(_fields(spec_raw), 1, _BYTES)])
    status: dict[str, Any] = {}
    if status_raw is not None:
        status_fields = _fields(status_raw)
        _put(status, "phase", _string(status_fields, 1))
        _put(status, "conditions", [_namespace_condition(c) for c in _all(status_fields, 2, _BYTES)])
    return {"spec": spec, "status": status}


def _namespace_condition(raw: memoryview) -> dict[str, Any]:
    f = _fields(raw)
    condition: dict[str, Any] = {"type": _string(f, 1), "status": _string(f, 2)}
    _put(condition, "lastTransitionTime", _time(_last(f, 4, _BYTES)))
    _put(condition, "reason", _string(f, 5))
    _put(condition, "message", _string(f, 6))
    return condition


def _service_account(f: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    secrets = []
    for raw in _all(f, 2, _BYTES):
        ref_fields = _fields(raw)
        ref: dict[str, Any] = {}
        keys = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        for number, key in enumerate(keys, start=1):
            _put(ref, key, _string(ref_fields, number))
        secrets.append(ref)
    _put(obj, "secrets", secrets)
    _put(obj, "imagePullSecrets", [{"name": _string(_fields(r), 1)} for r in _all(f, 3, _BYTES)])
    _put(obj, "automountServiceAccountToken", _bool(f, 4))
    return obj


def _spec(f: Fields, decode: Callable[[Fields], dict[str, Any]]) -> dict[str, Any]:
    raw = _last(f, 2, _BYTES)
    return {"spec": decode(_fields(raw if raw is not None else memoryview(b"")))}


def _token_request_spec(f: Fields) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    _put(spec, "audiences", [_text(v) for v in _all(f, 1, _BYTES)])
    _put(spec, "expirationSeconds", _int64(f, 4))
    bound = _last(f, 3, _BYTES)
    if bound is not None:
        ref_fields = _fields(bound)
        ref: dict[str, Any] = {}
        for number, key in enumerate(("kind", "apiVersion", "name", "uid"), start=1):
            _put(ref, key, _string(ref_fields, number))
        spec["boundObjectRef"] = ref
    return spec


def _token_review_spec(f: Fields) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    _put(spec, "token", _string(f, 1))
    _put(spec, "audiences", [_text(v) for v in _all(f, 2, _BYTES)])
    return spec


def _access_review_spec(f: Fields) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    resource, non_resource = _last(f, 1, _BYTES), _last(f, 2, _BYTES)
    if resource is not None:
        rf = _fields(resource)
        keys = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
        attrs: dict[str, Any] = {}
        for number, key in enumerate(keys, start=1):
            _put(attrs, key, _string(rf, number))
        spec["resourceAttributes"] = attrs
    if non_resource is not None:
        nf = _fields(non_resource)
        spec["nonResourceAttributes"] = {"path": _string(nf, 1), "verb": _string(nf, 2)}
    _put(spec, "user", _string(f, 3))
    _put(spec, "groups", [_text(v) for v in _all(f, 4, _BYTES)])
    _put(spec, "uid", _string(f, 6))
    return spec


def _strings(f: Fields, number: int) -> list[str]:
    return [_text(v) for v in _all(f, number, _BYTES)]


def _role(f: Fields) -> dict[str, Any]:
    keys = ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs")
    rules = []
    for raw in _all(f, 2, _BYTES):
        rf = _fields(raw)
        rule: dict[str, Any] = {}
        for number, key in enumerate(keys, start=1):
            _put(rule, key, _strings(rf, number))
        rules.append(rule)
    return {"rules": rules}


def _role_binding(f: Fields) -> dict[str, Any]:
    subjects = []
    for raw in _all(f, 2, _BYTES):
        sf = _fields(raw)
        subject: dict[str, Any] = {}
        for number, key in enumerate(("kind", "apiGroup", "name", "namespace"), start=1):
            _put(subject, key, _string(sf, number))
        subjects.append(subject)
    ref_raw = _last(f, 3, _BYTES)
    ref_fields = _fields(ref_raw if ref_raw is not None else memoryview(b""))
    ref = {key: _string(ref_fields, number) for number, key in enumerate(("apiGroup", "kind", "name"), start=1)}
    obj: dict[str, Any] = {"roleRef": ref}
    _put(obj, "subjects", subjects)
    return obj


def _csr(f: Fields) -> dict[str, Any]:
    """certificates.k8s.io/v1 CertificateSigningRequest (`kubectl certificate approve` PUTs it)."""
    sf, obj = _fields(_last(f, 2, _BYTES) or memoryview(b"")), {}
    spec: dict[str, Any] = {}
    request = _last(sf, 1, _BYTES)
    _put(spec, "request", _b64(request) if request is not None else None)
    for number, key in ((2, "username"), (3, "uid"), (7, "signerName")):
        _put(spec, key, _string(sf, number))
    _put(spec, "groups", _strings(sf, 4))
    _put(spec, "usages", _strings(sf, 5))
    _put(spec, "expirationSeconds", _int64(sf, 8))
    obj["spec"] = spec
    status_raw = _last(f, 3, _BYTES)
    if status_raw is not None:
        stf, status = _fields(status_raw), dict[str, Any]()
        conditions = []
        for raw in _all(stf, 1, _BYTES):
            cf, condition = _fields(raw), dict[str, Any]()
            for number, key in ((1, "type"), (6, "status"), (2, "reason"), (3, "message")):
                _put(condition, key, _string(cf, number))
            _put(condition, "lastUpdateTime", _time(_last(cf, 4, _BYTES)))
            _put(condition, "lastTransitionTime", _time(_last(cf, 5, _BYTES)))
            conditions.append(condition)
        _put(status, "conditions", conditions)
        certificate = _last(stf, 2, _BYTES)
        _put(status, "certificate", _b64(certificate) if certificate is not None and len(certificate) else None)
        obj["status"] = status
    return obj


_DECODERS: dict[tuple[str, str], Callable[[Fields], dict[str, Any]]] = {
    ("certificates.k8s.io/v1", "CertificateSigningRequest"): _csr,
    ("rbac.authorization.k8s.io/v1", "Role"): _role,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): _role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): _role_binding,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _role_binding,
    ("authentication.k8s.io/v1", "TokenRequest"): lambda f: _spec(f, _token_request_spec),
    ("authentication.k8s.io/v1", "TokenReview"): lambda f: _spec(f, _token_review_spec),
    ("authorization.k8s.io/v1", "SubjectAccessReview"): lambda f: _spec(f, _access_review_spec),
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): lambda f: _spec(f, _access_review_spec),
    ("batch/v1", "Job"): lambda f: jobproto.job(f, _fields, ProtobufError),
    ("v1", "Secret"): _secret,
    ("v1", "ConfigMap"): _configmap,
    ("v1", "Namespace"): _namespace,
    ("v1", "ServiceAccount"): _service_account,
}


def decode_object(body: bytes) -> dict[str, Any]:
    """The JSON form of a `k8s\\0` + runtime.Unknown protobuf body (Secret, ConfigMap, Namespace,
    ServiceAccount). Raises ProtobufError for anything malformed or of another kind."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body: missing the k8s\\0 prefix")
    try:
        envelope = _fields(memoryview(body)[len(MAGIC) :])
        type_meta_raw = _last(envelope, 1, _BYTES)
        type_meta = _fields(type_meta_raw) if type_meta_raw is not None else {}
        api_version, kind = _string(type_meta, 1), _string(type_meta, 2)
        encoding = _string(envelope, 3)
        if encoding:
            raise ProtobufError(f"content encoding {encoding!r} is not supported")
        decoder = _DECODERS.get((api_version, kind))
        if decoder is None:
            raise ProtobufError(f"protobuf for {api_version or '?'}/{kind or '?'} is not supported, send JSON")
        raw = _last(envelope, 2, _BYTES)
        fields = _fields(raw if raw is not None else memoryview(b""))
        obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
        obj["metadata"] = _object_meta(_last(fields, 1, _BYTES))
        obj.update(decoder(fields))
        return obj
    except RecursionError as exc:  # pragma: no cover - the schema bounds nesting, kept as a last guard
        raise ProtobufError("message nested too deeply") from exc
