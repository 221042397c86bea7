"""Mutating admission webhooks, called on Pod CREATE as the real API server calls them.

`Api` (POST pods) and the apps controllers call `admit_pod` before the object is stored.
Every registered MutatingWebhookConfiguration whose rules, objectSelector and
namespaceSelector match gets an AdmissionReview v1 POSTed over HTTPS to its
`clientConfig.url`, verified against its `caBundle`; the returned base64 JSONPatch is applied
and `failurePolicy` decides what a failed call means. Never called under the store lock.
"""

from __future__ import annotations

import base64
import binascii
import functools
import http.client
import json
import ssl
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from devcluster.errors import ApiError
from devcluster.patch import PatchError, json_patch
from devcluster.selectors import LabelRequirement, LabelSelector

WEBHOOKS_KEY = "admissionregistration.k8s.io/mutatingwebhookconfigurations"
NAMESPACES_KEY = "/namespaces"
DEFAULT_TIMEOUT = 10
MAX_ANSWER = 3 * 1024 * 1024
MAX_WARNINGS = 16  # per webhook answer, kept for the client
_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}

Obj = dict[str, Any]


class WebhookCallError(Exception):
    """The webhook could not be called or answered nonsense (failurePolicy decides)."""


def label_selector(raw: Any) -> LabelSelector:
    """A metav1.LabelSelector (matchLabels, matchExpressions); absent or empty matches all."""
    if not isinstance(raw, Mapping):
        return LabelSelector()
    requirements = [LabelRequirement(str(k), "=", (str(v),)) for k, v in (raw.get("matchLabels") or {}).items()]
    for expression in raw.get("matchExpressions") or []:
        operator = _OPERATORS.get(str(expression.get("operator")))
        if operator is None:
            raise ApiError(400, f"unknown selector operator {expression.get('operator')!r}")
        values = tuple(str(v) for v in expression.get("values") or ())
        requirements.append(LabelRequirement(str(expression.get("key")), operator, values))
    return LabelSelector(tuple(requirements))


def _rule_matches(rule: Mapping[str, Any], operation: str) -> bool:
    def has(field: str, value: str) -> bool:
        return any(v in ("*", value) for v in rule.get(field) or [])

    return (
        has("apiGroups", "") and has("apiVersions", "v1") and has("operations", operation) and has("resources", "pods")
    )


def _webhooks(store: Any) -> list[Obj]:
    configs, _ = store.list_objects(WEBHOOKS_KEY)
    return [hook for config in configs for hook in config.get("webhooks") or [] if isinstance(hook, dict)]


def admit_pod(
    store: Any, namespace: str, pod: Any, *, operation: str = "CREATE", warnings: list[str] | None = None
) -> Any:
    """The Pod after every matching mutating webhook; raises ApiError on a denial or on a
    failed call under failurePolicy Fail. A body that is not an object passes unchanged.
    Each webhook's `response.warnings` are appended to `warnings` (the API server sends them
    to the client as `Warning` headers)."""
    if not isinstance(pod, dict):
        return pod
    hooks = _webhooks(store)
    if not hooks:
        return pod
    ns = store.get(NAMESPACES_KEY, "", namespace) or {}
    ns_labels = (ns.get("metadata") or {}).get("labels") or {}
    for hook in hooks:
        if not any(_rule_matches(rule, operation) for rule in hook.get("rules") or []):
            continue
        pod_labels = (pod.get("metadata") or {}).get("labels") or {}
        if not label_selector(hook.get("objectSelector")).matches_labels(pod_labels):
            continue
        if not label_selector(hook.get("namespaceSelector")).matches_labels(ns_labels):
            continue
        pod = _call(hook, namespace, pod, operation, warnings if warnings is not None else [])
    return pod


def _call(hook: Mapping[str, Any], namespace: str, pod: Obj, operation: str, warnings: list[str]) -> Obj:
    name = str(hook.get("name", ""))
    try:
        response = _post(hook, _review(namespace, pod, operation))
    except WebhookCallError as exc:
        if hook.get("failurePolicy", "Fail") == "Ignore":
            return pod
        raise ApiError(500, f'Internal error occurred: failed calling webhook "{name}": {exc}') from None
    said = response.get("warnings")
    if isinstance(said, list):
        warnings += [str(text) for text in said if isinstance(text, str)][:MAX_WARNINGS]
    if not response.get("allowed"):
        result = response.get("status") or {}
        raw_code = result.get("code")
        code = raw_code if isinstance(raw_code, int) else 400
        message = result.get("message") or "without explanation"
        raise ApiError(max(400, code), f'admission webhook "{name}" denied the request: {message}')
    if not response.get("patch"):
        return pod
    try:
        ops = json.loads(base64.b64decode(response["patch"], validate=True))
        patched = json_patch(pod, ops)
    except (binascii.Error, ValueError, PatchError, ApiError, TypeError) as exc:
        raise ApiError(500, f'Internal error occurred: webhook "{name}" returned an unusable patch: {exc}') from None
    if not isinstance(patched, dict):
        raise ApiError(500, f'Internal error occurred: webhook "{name}" patched the Pod into a non-object')
    return patched


def _review(namespace: str, pod: Obj, operation: str) -> Obj:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": (pod.get("metadata") or {}).get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "devcluster"},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


@functools.lru_cache(maxsize=32)
def _client_context(ca_bundle: str) -> ssl.SSLContext:
    """Trust exactly the caBundle when one is given (as the API server does), else the system
    roots. Cached: loading the system roots costs tens of milliseconds per call."""
    if not ca_bundle:
        return ssl.create_default_context()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=base64.b64decode(ca_bundle, validate=True).decode())
    return context


def _post(hook: Mapping[str, Any], review: Obj) -> Obj:
    """POST the review to clientConfig.url over HTTPS; the AdmissionReview's response."""
    config = hook.get("clientConfig") or {}
    url = config.get("url")
    if not isinstance(url, str) or not url:
        raise WebhookCallError("the devcluster calls webhooks by clientConfig.url only (no Services here)")
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise WebhookCallError(f"clientConfig.url must be https://host[:port]/path, got {url!r}")
    try:
        context = _client_context(str(config.get("caBundle") or ""))
    except (binascii.Error, ValueError, ssl.SSLError) as exc:
        raise WebhookCallError(f"caBundle is not a base64 PEM certificate: {exc}") from None
    timeout = hook.get("timeoutSeconds") or DEFAULT_TIMEOUT
    connection = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout, context=context)
    try:
        body = json.dumps(review).encode()
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        data = answer.read(MAX_ANSWER + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise WebhookCallError(f"failed to call webhook: {type(exc).__name__}: {exc}") from None
    finally:
        connection.close()
    if answer.status != 200 or len(data) > MAX_ANSWER:
        raise WebhookCallError(f"the server answered HTTP {answer.status}")
    try:
        document = json.loads(data)
        response = document["response"]
    except (ValueError, KeyError, TypeError):
        raise WebhookCallError("the answer is not an AdmissionReview with a response") from None
    if not isinstance(response, dict) or response.get("uid") != review["request"]["uid"]:
        raise WebhookCallError("the AdmissionReview response does not carry the request's uid")
    return response
