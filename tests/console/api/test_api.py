"""The REST API: no anonymous access, token and session auth, pagination, filters, the
staff-only DELETE, the schema, the browsable API, and a short schemathesis run."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from console import runtime
from placement.blocklist import Blocklist
from providers.base import BlockBreadth, BlockScope, Tier

ENDPOINTS = ["/api/blocklist/", "/api/pods/", "/api/claims/", "/api/nodes/", "/api/pools/", "/api/schema/"]


@pytest.fixture
def blocklist() -> Iterator[Blocklist]:
    blocklist = Blocklist(uniform=lambda: 0.0, pool_ttl={"train": 300.0}.get, default_ttl=200.0)
    blocklist.record(
        "gpu-a",
        BlockScope("gpu-a", BlockBreadth.OFFERING, Tier.SPOT, "h100", "us-east-1", "NoCapacity: full"),
        pool="train",
    )
    blocklist.record("gpu-a", BlockScope("gpu-a", BlockBreadth.TIER, Tier.ON_DEMAND, reason="QuotaExceeded: q"))
    blocklist.use_pool_ttls({"train": 100.0}.get)  # the pool's TTL was edited since
    blocklist.record("gpu-b", BlockScope("gpu-b", BlockBreadth.PROVIDER, reason="Unauthorized: bad key"), pool="train")
    runtime.install(blocklist=blocklist)
    yield blocklist
    runtime.clear()


@pytest.fixture
def user(db: Any) -> User:
    return User.objects.create_user("alice", password="pw-alice-123")


@pytest.fixture
def staff(db: Any) -> User:
    return User.objects.create_user("root", password="pw-root-123", is_staff=True)


def token_client(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.mark.parametrize("path", ENDPOINTS)
def test_anonymous_calls_are_refused(db: Any, blocklist: Blocklist, path: str) -> None:
    response = APIClient().get(path)
    assert response.status_code in (401, 403)
    assert "credentials were not provided" in response.content.decode()


def test_a_bad_token_is_401(db: Any, blocklist: Blocklist) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token nope")
    assert client.get("/api/blocklist/").status_code == 401


def test_token_auth_lists_entries_soonest_expiry_first_with_pagination(user: User, blocklist: Blocklist) -> None:
    response = token_client(user).get("/api/blocklist/?limit=2")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3 and body["next"] and len(body["results"]) == 2
    first = body["results"][0]
    assert first["provider"] == "gpu-b" and first["scope"]["breadth"] == "provider"
    assert set(first) >= {"id", "scope", "reason", "pool", "recorded_at", "expires_at", "seconds_left"}
    assert 99 <= first["seconds_left"] <= 100


def test_session_auth_works_and_the_browsable_api_renders(user: User, blocklist: Blocklist) -> None:
    client = APIClient()
    client.force_login(user)
    response = client.get("/api/blocklist/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200 and b"<html" in response.content.lower()


@pytest.mark.parametrize(
    ("query", "providers"),
    [("provider=gpu-a", ["gpu-a", "gpu-a"]), ("scope=provider", ["gpu-b"]), ("pool=train", ["gpu-b", "gpu-a"])],
)
def test_filters_by_provider_scope_and_pool(user: User, blocklist: Blocklist, query: str, providers: list[str]) -> None:
    body = token_client(user).get(f"/api/blocklist/?{query}").json()
    assert [r["provider"] for r in body["results"]] == providers


def test_a_bad_filter_is_a_400_with_a_message(user: User, blocklist: Blocklist) -> None:
    response = token_client(user).get("/api/blocklist/?scope=galaxy")
    assert response.status_code == 400 and "galaxy" in response.content.decode()


def test_get_one_entry_and_404_for_unknown(user: User, blocklist: Blocklist) -> None:
    entry = blocklist.entries()[0]
    client = token_client(user)
    assert client.get(f"/api/blocklist/{entry.id}").json()["id"] == entry.id
    assert client.get("/api/blocklist/b999").status_code == 404
    assert client.get("/api/blocklist/zzz").status_code == 404


def test_delete_is_staff_only_and_logged(
    user: User, staff: User, blocklist: Blocklist, caplog: pytest.LogCaptureFixture
) -> None:
    entry = blocklist.entries()[0]
    assert token_client(user).delete(f"/api/blocklist/{entry.id}").status_code == 403
    assert blocklist.get(entry.id) is not None
    with caplog.at_level(logging.INFO):
        assert token_client(staff).delete(f"/api/blocklist/{entry.id}").status_code == 204
    assert blocklist.get(entry.id) is None
    assert any(entry.id in r.getMessage() and "root" in r.getMessage() for r in caplog.records)
    assert token_client(staff).delete(f"/api/blocklist/{entry.id}").status_code == 404


def test_empty_runtime_gives_empty_lists(user: User) -> None:
    runtime.clear()
    client = token_client(user)
    for path in ENDPOINTS[:-1]:
        body = client.get(path).json()
        assert body["count"] == 0 and body["results"] == []


def test_the_schema_documents_every_endpoint(user: User) -> None:
    response = token_client(user).get("/api/schema/?format=json")
    assert response.status_code == 200
    paths = set(response.json()["paths"])
    assert {
        "/api/blocklist/",
        "/api/blocklist/{id}/",
        "/api/pods/",
        "/api/claims/",
        "/api/nodes/",
        "/api/pools/",
    } <= paths


def test_the_schema_shows_a_pods_endpoint_price_and_pending_phase(user: User) -> None:
    """The API serialises the mirror's projection (`console.rows`): the same Pod fields."""
    components = token_client(user).get("/api/schema/?format=json").json()["components"]["schemas"]
    pod = components["Pod"]["properties"]
    assert {"endpoint", "hourly_price", "provisioned_at"} <= set(pod)
    assert not pod["phase"].get("nullable") and "Pending" in pod["phase"]["description"]


@pytest.fixture
def keep_test_connection() -> Iterator[None]:
    """Requests through the raw WSGI app must not close the test's database connection (the
    Django test client disconnects the same handlers for the same reason)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def test_schemathesis_finds_no_server_error(staff: User, blocklist: Blocklist, keep_test_connection: None) -> None:
    auth = {"Authorization": f"Token {Token.objects.get_or_create(user=staff)[0].key}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application(), headers=auth)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 6
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case: Any) -> None:
            response = case.call(headers=auth)
            assert response.status_code < 500, (case.method, case.formatted_path, response.status_code)

        call()
