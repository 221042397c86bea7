"""The metrics listener (`console.exporter`) over real HTTP and TLS: `/metrics` of the
console's registry, no `_created` series, the process's own metrics; nothing else served;
TLS with the given certificate; token auth by TokenReview and a SubjectAccessReview for
`get` on `/metrics` (401, 403, 200, 503), the token never logged.

The reviews here are answered by `ReviewingApi`, a stand-in for the API server's two review
endpoints at the Kube client's seam; tests/nebula_site/test_runvnode_metrics.py asks real ones.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client.parser import text_string_to_metric_families

from console.exporter import MetricsListener
from kube.client import KubeError, UnreachableError
from kube.reviews import ACCESS_REVIEWS, TOKEN_REVIEWS, Reviewer
from tests.support.clients.scrape import get
from tests.support.servers.tls import self_signed_certificate

READER, OUTSIDER = "reader-token-" + "x" * 20, "outsider-token-" + "y" * 20


class ReviewingApi:
    """Answers TokenReview and SubjectAccessReview as an API server would for two tokens:
    READER (RBAC allows get /metrics) and OUTSIDER (authenticated, not allowed); `down` makes
    every review fail as an unreachable API server does."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.down = False

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((path, body))
        if self.down:
            raise UnreachableError(0, "Unreachable", "the API server does not answer")
        spec = body["spec"]
        if path == TOKEN_REVIEWS:
            users = {READER: "system:serviceaccount:monitoring:prometheus", OUTSIDER: "system:serviceaccount:x:y"}
            name = users.get(spec["token"])
            user = {"username": name, "groups": ["system:serviceaccounts"]} if name else {}
            return {"status": {"authenticated": name is not None, "user": user}}
        if path == ACCESS_REVIEWS:
            ok = spec["user"].endswith(":prometheus") and spec.get("nonResourceAttributes") == {
                "path": "/metrics",
                "verb": "get",
            }
            return {"status": {"allowed": ok}}
        raise KubeError(404, "NotFound", path)


@pytest.fixture
def plain() -> Iterator[MetricsListener]:
    listener = MetricsListener("127.0.0.1", 0)
    listener.start()
    yield listener
    listener.stop()


def test_plain_http_serves_the_registry_with_process_metrics_and_no_created_series(plain: MetricsListener) -> None:
    status, body = get(f"http://127.0.0.1:{plain.port}/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert {"nebula_provisions", "nebula_leader", "nebula_blocklist_size"} <= set(families)
    assert {
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "python_gc_objects_collected",
        "python_info",
    } <= set(families)
    assert "_created" not in body


@pytest.mark.parametrize("path", ["/", "/admin/", "/api/pods/", "/metricsx"])
def test_only_metrics_is_served(plain: MetricsListener, path: str) -> None:
    status, body = get(f"http://127.0.0.1:{plain.port}{path}")
    assert (status, body) == (404, "only /metrics is served here\n"), path


def test_a_port_in_use_is_an_error_at_start(plain: MetricsListener) -> None:
    with pytest.raises(OSError):
        MetricsListener("127.0.0.1", plain.port).start()


def test_tls_serves_the_given_certificate(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = self_signed_certificate(key, "nebula-metrics", ip="127.0.0.1", ca=True)
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "tls.crt").write_bytes(pem)
    (tmp_path / "tls.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    listener = MetricsListener("127.0.0.1", 0, cert=(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")))
    listener.start()
    try:
        assert listener.scheme == "https"
        trusting = ssl.create_default_context(cadata=pem.decode())
        status, body = get(f"https://127.0.0.1:{listener.port}/metrics", context=trusting)
        assert status == 200 and "nebula_leader" in body
        with pytest.raises(OSError):  # plain HTTP to a TLS port gets no answer it can read
            get(f"http://127.0.0.1:{listener.port}/metrics")
        # A client that connects and never says a word holds up no one else's scrape.
        with socket.create_connection(("127.0.0.1", listener.port)):
            assert get(f"https://127.0.0.1:{listener.port}/metrics", context=trusting)[0] == 200
    finally:
        listener.stop()


def test_a_certificate_that_does_not_load_is_an_error_at_start(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    with pytest.raises((ssl.SSLError, OSError)):
        MetricsListener("127.0.0.1", 0, cert=(str(tmp_path / "tls.crt"), str(tmp_path / "tls.crt"))).start()


@pytest.fixture
def gated() -> Iterator[tuple[MetricsListener, ReviewingApi]]:
    api = ReviewingApi()
    listener = MetricsListener("127.0.0.1", 0, reviewer=Reviewer(api, ttl=0))  # type: ignore[arg-type]
    listener.start()
    yield listener, api
    listener.stop()


def test_token_auth_answers_401_403_or_the_metrics_as_rbac_decides(
    gated: tuple[MetricsListener, ReviewingApi], caplog: pytest.LogCaptureFixture
) -> None:
    listener, api = gated
    url = f"http://127.0.0.1:{listener.port}/metrics"
    caplog.set_level(logging.DEBUG)
    assert get(url) == (401, "a bearer token is required\n")
    assert get(url, token="who-knows") == (401, "the token is not authenticated\n")
    assert get(url, token=OUTSIDER) == (403, "system:serviceaccount:x:y may not get /metrics\n")
    status, body = get(url, token=READER)
    assert status == 200 and "nebula_leader" in body
    access = [body["spec"] for path, body in api.asked if path == ACCESS_REVIEWS]
    assert access[-1]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert access[-1]["user"] == "system:serviceaccount:monitoring:prometheus"
    api.down = True
    assert get(url, token=READER) == (503, "cannot review the token now\n")
    assert "cannot review a scraper's token" in caplog.text
    assert READER not in caplog.text and OUTSIDER not in caplog.text


def test_token_auth_still_refuses_other_paths(gated: tuple[MetricsListener, ReviewingApi]) -> None:
    listener, api = gated
    assert get(f"http://127.0.0.1:{listener.port}/debug", token=READER)[0] == 404
    assert api.asked == []  # no review for a path that is not served
