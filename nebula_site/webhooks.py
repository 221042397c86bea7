"""The console's admission webhook endpoint: `POST /webhooks/pods` (AdmissionReview v1).

The API server calls it over TLS on Pod CREATE (deploy/webhook/). The decision is
`placement.admission.review`, a pure function; this view only bounds and moves bytes, and
gives it the Pod's candidate providers from what this process runs (`console.runtime`):
the providers of the Pod's NodePool for an opted-in Pod, the node's provider for a Pod
bound to a `nebula-` node by hand. A manager that runs neither answers without the shape check.
Tests: tests/nebula_site/test_webhook_view.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from console import runtime
from kube import names
from placement import admission
from providers.shape import Shapes


def _failure(code: int, message: str) -> JsonResponse:
    return JsonResponse(admission.status_body(code, message), status=code)


def candidates_of(pod: Mapping[str, Any]) -> admission.Candidates | None:
    """The providers this process runs that may serve `pod`, with their shapes."""
    now = runtime.current()
    shapes: dict[str, Shapes] = {h.provider.name: h.provider.capabilities().shapes for h in now.handlers}
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if node:
        bound = {name: served for name, served in shapes.items() if names.node_name(name) == node}
        return admission.Candidates(f"node {node}", bound) if bound else None
    metadata = pod.get("metadata") or {}
    pod_labels = metadata.get("labels") or {}
    if pod_labels.get(names.ENABLED_LABEL) != "true" or now.placement is None:
        return None
    state = now.placement.pools.get(str(pod_labels.get(names.POOL_LABEL) or ""))
    if state is None or state.pool is None:
        return None  # placement says what is wrong with the pool
    listed = {entry.name: shapes[entry.name] for entry in state.pool.providers if entry.name in shapes}
    return admission.Candidates(f"NodePool {state.pool.name!r}", listed) if listed else None


@csrf_exempt
def pods(request: HttpRequest) -> HttpResponse:
    """Gate opted-in Pods and check every candidate Pod's shape; other Pods pass untouched."""
    if request.method != "POST":
        return _failure(405, "POST an admission.k8s.io/v1 AdmissionReview")
    try:
        body = request.body
    except RequestDataTooBig:
        return _failure(413, "request body too large")
    status, answer = admission.review(
        body, outage_seconds=settings.NEBULA.get("OUTAGE_TOLERATION_SECONDS"), candidates_of=candidates_of
    )
    return JsonResponse(answer, status=status)
