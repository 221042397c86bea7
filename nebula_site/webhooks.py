"""The console's admission webhook endpoint: `POST /webhooks/pods` (AdmissionReview v1).

The API server calls it over TLS on Pod CREATE (deploy/webhook/). The decision is
`placement.admission.review`, a pure function; this view only bounds and moves bytes.
Tests: tests/nebula_site/test_webhook_view.py.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from placement import admission


def _failure(code: int, message: str) -> JsonResponse:
    return JsonResponse(admission.status_body(code, message), status=code)


@csrf_exempt
def pods(request: HttpRequest) -> HttpResponse:
    """Gate opted-in Pods; every other Pod is allowed untouched."""
    if request.method != "POST":
        return _failure(405, "POST an admission.k8s.io/v1 AdmissionReview")
    try:
        body = request.body
    except RequestDataTooBig:
        return _failure(413, "request body too large")
    status, answer = admission.review(body, outage_seconds=settings.NEBULA.get("OUTAGE_TOLERATION_SECONDS"))
    return JsonResponse(answer, status=status)
