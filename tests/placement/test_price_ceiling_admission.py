"""Admission and the Pod's price ceiling: a `nebula.io/max-hourly-price` that is not a price is
admitted (and gated) with a warning naming the annotation; placement holds it as InvalidRequest."""

from __future__ import annotations

import base64
import json
from typing import Any

from kube import names
from placement.admission import review
from tests.support.factories import make_pod


def review_of(pod: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod},
    }
    status, answer = review(json.dumps(body).encode())
    assert status == 200
    response: dict[str, Any] = answer["response"]
    return response


def test_a_bad_ceiling_is_admitted_with_a_warning() -> None:
    labels = {names.ENABLED_LABEL: "true", names.POOL_LABEL: "train"}
    bad = make_pod("p", labels=labels, annotations={names.MAX_HOURLY_PRICE_ANNOTATION: "cheap"})
    response = review_of(bad)
    assert response["allowed"] is True
    assert response["warnings"] == [
        f"annotation {names.MAX_HOURLY_PRICE_ANNOTATION}: 'cheap' is not a price in dollars an hour;"
        ' write a number such as "3.50"; placement holds the Pod (InvalidRequest) until it is fixed'
    ]
    gate = {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": names.PLACEMENT_GATE}]}
    assert gate in json.loads(base64.b64decode(response["patch"]))

    good = make_pod("p", labels=labels, annotations={names.MAX_HOURLY_PRICE_ANNOTATION: "3.50"})
    assert "warnings" not in review_of(good)
    not_ours = make_pod("p", annotations={names.MAX_HOURLY_PRICE_ANNOTATION: "cheap"})
    assert "warnings" not in review_of(not_ours)
