"""GET /api/spend/: login required, the report placement gives (pools against their budgets,
the dearest Pods, the buckets) with unknown amounts marked unknown, never 0; bounded lists;
the empty report without placement; documented in the OpenAPI schema; no server error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from console import runtime
from tests.console.spendreports import AT, ReportingPlacement, report


@pytest.fixture
def client(db: Any) -> APIClient:
    client = APIClient()
    client.force_login(User.objects.create_user("alice"))
    return client


@pytest.fixture
def reporting() -> Iterator[ReportingPlacement]:
    placement = ReportingPlacement(report(pods=60))
    runtime.install(placement=placement)  # type: ignore[arg-type]
    yield placement
    runtime.clear()


def test_anonymous_calls_are_refused(db: Any, reporting: ReportingPlacement) -> None:
    assert APIClient().get("/api/spend/").status_code in (401, 403)


def test_the_report_is_served_with_unknown_amounts_marked(client: APIClient, reporting: ReportingPlacement) -> None:
    response = client.get("/api/spend/")
    assert response.status_code == 200
    body = response.json()
    assert body["running"] is True and body["at"] == AT.isoformat().replace("+00:00", "Z")
    assert [p["pool"] for p in body["pools"]] == ["byo", "gpu-a", "gpu-b"] and body["pool_count"] == 3
    pools = {p["pool"]: p for p in body["pools"]}
    gpu_a = pools["gpu-a"]
    assert gpu_a["rate"] == {"dollars": 9.6, "unpriced": 0, "text": "$9.60/h"}
    assert gpu_a["exceeded"] == "pool gpu-a at $19.20/h of $20.00/h"
    assert gpu_a["budget"]["text"] == "$20.00/h, $300.00/day, 2 instances" and gpu_a["budget"]["on_exceeded"] == "Hold"
    assert len(gpu_a["hours"]) == 24 and len(gpu_a["days"]) == 30
    assert gpu_a["hours"][-1]["by_provider"] == {"fake-a": pytest.approx(9.6 * 24)}
    byo = pools["byo"]
    assert byo["budget"] is None and byo["rate"]["text"] == "unknown"
    assert byo["today"] == {"dollars": 0.0, "unpriced_seconds": 3600.0, "unknown": True, "text": "unknown"}
    assert len(body["top_pods"]) == 50 and body["top_pods"][0]["name"] == "train-000"
    assert len(body["providers_hours"]) == 24 and len(body["providers_days"]) == 30


def test_an_unpriced_pod_has_a_null_price_and_an_unknown_total(client: APIClient) -> None:
    runtime.install(placement=ReportingPlacement(report(pods=1)))  # type: ignore[arg-type]
    try:
        pods = client.get("/api/spend/").json()["top_pods"]
    finally:
        runtime.clear()
    (mystery,) = [p for p in pods if p["name"] == "mystery"]
    assert mystery["hourly_price"] is None and mystery["total"]["text"] == "unknown" and mystery["pool"] is None


def test_without_placement_the_report_is_empty(client: APIClient) -> None:
    runtime.clear()
    body = client.get("/api/spend/").json()
    assert body["running"] is False and body["pools"] == [] and body["top_pods"] == []


def test_the_schema_documents_the_report(client: APIClient) -> None:
    schema = client.get("/api/schema/?format=json").json()
    assert "/api/spend/" in schema["paths"]
    response = schema["paths"]["/api/spend/"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert response == {"$ref": "#/components/schemas/SpendReport"}
    components = schema["components"]["schemas"]
    assert {"pools", "top_pods", "providers_hours", "providers_days"} <= set(components["SpendReport"]["properties"])
    assert components["PodSpend"]["properties"]["hourly_price"].get("nullable") is True
    assert "unknown" in components["Money"]["properties"]
