"""certificates.k8s.io/v1 CertificateSigningRequest: the real API server's strategy and
validation (create, update, the `/approval` and `/status` subresources) and its table.

Pure functions over plain dicts, called by `resources.py` (create and update), `api.py`
(the requester's identity) and `tables.py`. The kubelet-serving rules are not here: as in
kube-controller-manager, the signer (`csrsigner`) checks them and marks a CSR Failed.
Tests: tests/devcluster/test_csr.py.
"""

from __future__ import annotations

import base64
import copy
import re
from datetime import datetime
from typing import Any

from cryptography import x509

from devcluster.durations import age
from devcluster.errors import (
    ApiError,
    Cause,
    bad_request,
    duplicate,
    forbidden,
    invalid,
    invalid_value,
    not_supported,
    required,
)

KIND = "CertificateSigningRequest"
_SIGNER_FORM = "must be a fully qualified domain and path of the form 'example.com/signer-name'"
GROUP = "certificates.k8s.io"
MIN_EXPIRATION = 600  # seconds: shorter spec.expirationSeconds are refused
APPROVED, DENIED, FAILED = "Approved", "Denied", "Failed"
KNOWN_USAGES = (
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
    "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
)  # fmt: skip
_SIGNER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[^/\s]+$")
_STATUSES = ("True", "False", "Unknown")

Obj = dict[str, Any]


def is_csr(kind: str, group: str) -> bool:
    return kind == KIND and group == GROUP


def _invalid(name: str, cause: Cause) -> ApiError:
    return invalid(KIND, name, [cause], group=GROUP)


def _bytes_invalid(field: str, detail: str) -> Cause:
    """A `[]byte` field's error: field.Invalid prints the value as Go's %#v does, elided here."""
    return Cause(field, "FieldValueInvalid", f"Invalid value: []byte{{...}}: {detail}")


def decode_pem(value: Any, field: str) -> bytes:
    """A `[]byte` field of the JSON body: base64, as Go's encoding/json writes it."""
    if not isinstance(value, str):
        raise bad_request(f"{field}: expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise bad_request(f"{field}: illegal base64 data") from None


def parse_request(csr: Obj) -> x509.CertificateSigningRequest:
    """The PKCS#10 request of a stored (validated) CSR."""
    return x509.load_pem_x509_csr(decode_pem((csr.get("spec") or {}).get("request"), "spec.request"))


def with_requester(body: Any, *, username: str, uid: str, groups: tuple[str, ...]) -> Any:
    """The API server overwrites spec.username, uid, groups and extra with the caller's."""
    if isinstance(body, dict) and isinstance(body.get("spec"), dict):
        body = copy.deepcopy(body)
        spec = body["spec"]
        spec.pop("extra", None)
        spec.update({"username": username, "uid": uid, "groups": list(groups)})
    return body


def validate_new(csr: Obj) -> None:
    """ValidateCertificateSigningRequestCreate: signerName, request, usages, expirationSeconds."""
    name = csr["metadata"].get("name", "")
    spec = csr.get("spec")
    if not isinstance(spec, dict):
        raise _invalid(name, required("spec.request"))
    signer = spec.get("signerName")
    if not signer:
        raise _invalid(name, required("spec.signerName"))
    if not isinstance(signer, str) or not _SIGNER_NAME.match(signer):
        raise _invalid(
            name,
            invalid_value("spec.signerName", signer, _SIGNER_FORM),
        )
    if not spec.get("request"):
        raise _invalid(name, required("spec.request"))
    pem = decode_pem(spec["request"], "spec.request")
    try:
        request = x509.load_pem_x509_csr(pem)
    except ValueError:
        raise _invalid(name, _bytes_invalid("spec.request", "PEM block type must be CERTIFICATE REQUEST")) from None
    if not request.is_signature_valid:
        raise _invalid(name, _bytes_invalid("spec.request", "x509: signature is invalid"))
    _validate_usages(name, spec.get("usages"))
    seconds = spec.get("expirationSeconds")
    if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < MIN_EXPIRATION):
        raise _invalid(
            name, invalid_value("spec.expirationSeconds", seconds, "may not specify a duration less than 600 seconds")
        )
    csr.pop("status", None)


def _validate_usages(name: str, usages: Any) -> None:
    if not isinstance(usages, list) or not usages:
        raise _invalid(name, required("spec.usages"))
    seen: set[str] = set()
    for i, usage in enumerate(usages):
        if usage not in KNOWN_USAGES:
            raise _invalid(name, not_supported(f"spec.usages[{i}]", usage, KNOWN_USAGES))
        if usage in seen:
            raise _invalid(name, duplicate(f"spec.usages[{i}]", usage))
        seen.add(usage)


def prepare_update(old: Obj, new: Obj, *, subresource: str, now: str) -> Obj:
    """What an update may change. The main resource: metadata only (spec and status kept);
    `/approval`: the conditions (Approved, Denied and others); `/status`: the certificate and
    the conditions other than Approved and Denied. Raises ApiError (422) on invalid input."""
    name = old["metadata"]["name"]
    result = copy.deepcopy(new)
    result["spec"] = copy.deepcopy(old.get("spec"))
    old_status = old.get("status") or {}
    if not subresource:
        result["status"] = copy.deepcopy(old_status)
        if not result["status"]:
            result.pop("status")
        return result
    if subresource not in ("approval", "status"):
        raise ApiError(404, f"the server could not find the requested resource ({subresource})")
    sent = new.get("status")
    status: Obj = sent if isinstance(sent, dict) else {}
    conditions = _checked_conditions(name, status.get("conditions"), now=now)
    old_conditions = old_status.get("conditions") or []
    if subresource == "approval":
        certificate = old_status.get("certificate")
    else:
        keep = [c for c in old_conditions if c.get("type") in (APPROVED, DENIED)]
        conditions = keep + [c for c in conditions if c.get("type") not in (APPROVED, DENIED)]
        certificate = _checked_certificate(name, old_status, status.get("certificate"), conditions)
    _check_kept(name, old_conditions, conditions)
    _stamp_transitions(old_conditions, conditions, now)
    merged: Obj = {}
    if conditions:
        merged["conditions"] = conditions
    if certificate:
        merged["certificate"] = certificate
    if merged:
        result["status"] = merged
    else:
        result.pop("status", None)
    return result


def _checked_conditions(name: str, conditions: Any, *, now: str) -> list[Obj]:
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        raise bad_request("status.conditions must be an array")
    seen: set[str] = set()
    checked: list[Obj] = []
    for i, condition in enumerate(conditions):
        if not isinstance(condition, dict) or not condition.get("type"):
            raise _invalid(name, required(f"status.conditions[{i}].type"))
        kind, status = condition["type"], condition.get("status") or ""
        if kind in seen:
            raise _invalid(name, duplicate(f"status.conditions[{i}].type", kind))
        seen.add(kind)
        if not status:
            raise _invalid(name, required(f"status.conditions[{i}].status"))
        allowed = ("True",) if kind in (APPROVED, DENIED, FAILED) else _STATUSES
        if status not in allowed:
            raise _invalid(name, not_supported(f"status.conditions[{i}].status", status, allowed))
        checked.append({**condition, "lastUpdateTime": condition.get("lastUpdateTime") or now})
    if APPROVED in seen and DENIED in seen:
        raise _invalid(
            name, invalid_value("status.conditions", DENIED, "Approved and Denied conditions are mutually exclusive")
        )
    return checked


def _check_kept(name: str, old: list[Obj], new: list[Obj]) -> None:
    kinds = {c.get("type") for c in new}
    for condition in old:
        if condition.get("type") in (APPROVED, DENIED, FAILED) and condition.get("type") not in kinds:
            detail = f'updates may not remove a condition of type "{condition["type"]}"'
            raise _invalid(name, forbidden("status.conditions", detail))


def _stamp_transitions(old: list[Obj], new: list[Obj], now: str) -> None:
    before = {c.get("type"): c for c in old}
    for condition in new:
        previous = before.get(condition["type"])
        if previous is not None and previous.get("status") == condition.get("status"):
            condition["lastTransitionTime"] = previous.get("lastTransitionTime") or now
        elif not condition.get("lastTransitionTime"):
            condition["lastTransitionTime"] = now


def _checked_certificate(name: str, old_status: Obj, value: Any, conditions: list[Obj]) -> str | None:
    existing = old_status.get("certificate")
    if not value:
        if existing:
            raise _invalid(name, forbidden("status.certificate", "updates may not remove an existing certificate"))
        return None
    if existing and value != existing:
        raise _invalid(name, forbidden("status.certificate", "updates may not modify existing certificate"))
    kinds = {c.get("type") for c in conditions}
    if APPROVED not in kinds or DENIED in kinds or FAILED in kinds:
        raise _invalid(name, forbidden("status.certificate", "certificate may only be set on an approved request"))
    try:
        x509.load_pem_x509_certificates(decode_pem(value, "status.certificate"))
    except ValueError:
        detail = "must contain at least one CERTIFICATE PEM block"
        raise _invalid(name, invalid_value("status.certificate", "<certificate data>", detail)) from None
    return str(value)


def condition_text(csr: Obj) -> str:
    """kubectl's CONDITION column: Pending, Approved, Approved,Issued, Denied, Failed."""
    status = csr.get("status") or {}
    kinds = [c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"]
    words = [k for k in (APPROVED, DENIED, FAILED) if k in kinds]
    if status.get("certificate"):
        words.append("Issued")
    return ",".join(words) or "Pending"


COLUMNS = [("Name", "string", 0), ("Age", "string", 0), ("SignerName", "string", 0)] + [
    ("Requestor", "string", 0),
    ("RequestedDuration", "string", 0),
    ("Condition", "string", 0),
]


def table_row(csr: Obj, now: datetime) -> list[Any]:
    meta, spec = csr.get("metadata") or {}, csr.get("spec") or {}
    seconds = spec.get("expirationSeconds")
    duration = "<none>"
    if isinstance(seconds, int):
        duration = (
            f"{seconds // 3600}h"
            if seconds % 3600 == 0
            else f"{seconds // 60}m"
            if seconds % 60 == 0
            else f"{seconds}s"
        )
    return [
        meta.get("name", ""),
        age(meta.get("creationTimestamp"), now),
        spec.get("signerName", ""),
        spec.get("username", ""),
        duration,
        condition_text(csr),
    ]
