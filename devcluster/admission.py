"""Mutating admission webhooks, called on Pod CREATE as the real API server calls them.

`Api` (POST pods) and the apps controllers call `admit_pod` before the object is stored.
Every registered MutatingWebhookConfiguration whose rules, objectSelector and
namespaceSelector match gets an AdmissionReview v1 POSTed over HTTPS to its
`clientConfig.url`, or to an endpoint of its `clientConfig.service` (`endpoints.resolve`) with
the certificate checked for `<service>.<namespace>.svc`, verified against its `caBundle`; the
returned base64 JSONPatch is applied and `failurePolicy` decides what a failed call means.
Never called under the store lock. Tests: tests/devcluster/test_admission*.py.
"""

from __future__ import annotations

import base64
import binascii
import functools
import http.client
import json
import socket
import ssl
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from devcluster import endpoints
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
        pod = _call(store, hook, namespace, pod, operation, warnings if warnings is not None else [])
    return pod


def _call(store: Any, hook: Mapping[str, Any], namespace: str, pod: Obj, operation: str, warnings: list[str]) -> Obj:
    name = str(hook.get("name", ""))
    try:
        response = _post(store, hook, _review(namespace, pod, operation))
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


class _Connection(http.client.HTTPSConnection):
    """HTTPS to `address` while verifying the certificate for `host` (SNI and hostname check):
    how the API server reaches `<service>.<namespace>.svc` at an endpoint's address."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.address = address
        self.tls = context

    def connect(self) -> None:
        raw = socket.create_connection((self.address, self.port), self.timeout)
        try:
            self.sock = self.tls.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise


def _target(store: Any, config: Mapping[str, Any]) -> endpoints.Target:
    """Where clientConfig points: its https `url`, or its `service` resolved to an endpoint."""
    url = config.get("url")
    if config.get("service") is not None or not url:
        return endpoints.resolve(store, config)
    parts = urlsplit(str(url))
    if parts.scheme != "https" or not parts.hostname:
        raise WebhookCallError(f"clientConfig.url must be https://host[:port]/path, got {url!r}")
    port = parts.port or 443
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    origin = f"https://{parts.netloc}"
    return endpoints.Target(host=parts.hostname, port=port, server_name=parts.hostname, origin=origin, path=path)


def _post(store: Any, hook: Mapping[str, Any], review: Obj) -> Obj:
    """POST the review to the webhook over HTTPS; the AdmissionReview's response."""
    config = hook.get("clientConfig") or {}
    timeout = hook.get("timeoutSeconds") or DEFAULT_TIMEOUT
    try:
        target = _target(store, config)
    except endpoints.ResolveError as exc:
        origin, path = endpoints.service_origin(config)
        if not origin:
            raise WebhookCallError(str(exc)) from None
        raise WebhookCallError(f'failed to call webhook: Post "{origin}{path}?timeout={timeout}s": {exc}') from None
    try:
        context = _client_context(str(config.get("caBundle") or ""))
    except (binascii.Error, ValueError, ssl.SSLError) as exc:
        raise WebhookCallError(f"caBundle is not a base64 PEM certificate: {exc}") from None
    connection = _Connection(target.server_name, target.port, address=target.host, timeout=timeout, context=context)
    path = target.path + ("&" if "?" in target.path else "?") + f"timeout={timeout}s"
    where = f'Post "{target.origin}{path}"'
    try:
        body = json.dumps(review).encode()
        host = target.origin.removeprefix("https://")  # the Service's name and port, not the endpoint's
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json", "Host": host})
        answer = connection.getresponse()
        data = answer.read(MAX_ANSWER + 1)
    except ssl.SSLCertVerificationError as exc:
        reason = f"tls: failed to verify certificate: {exc.verify_message}"
        raise WebhookCallError(f"failed to call webhook: {where}: {reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise WebhookCallError(f"failed to call webhook: {where}: {type(exc).__name__}: {exc}") from None
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
