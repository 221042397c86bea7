"""The metrics listener (`console.exporter`) over real HTTP and TLS: `/metrics` of the
console's registry, no `_created` series, the process's own metrics; nothing else served;
TLS with the given certificate; token auth by TokenReview and a SubjectAccessReview for
`get` on `/metrics` (401, 403, 200, 503), the token never logged. I7: the listener shares the
kubelet and console listeners' bounds (vnode/kubelet/limits.py): no thread per connection, the
head deadline, the per-client and total caps, the keep-alive timeout, the small body limit.

The reviews here are answered by `ReviewingApi`, a stand-in for the API server's two review
endpoints at the Kube client's seam; tests/nebula_site/test_runvnode_metrics.py asks real ones.
"""

from __future__ import annotations

import http.client
import logging
import os
import resource
import selectors
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client.parser import text_string_to_metric_families

from kube.client import KubeError, UnreachableError
from kube.reviews import ACCESS_REVIEWS, TOKEN_REVIEWS, Reviewer
from nebula_site.manager.listeners import MetricsListener
from tests.support.clients.scrape import get
from tests.support.polling import wait_for
from tests.support.rigs.listeners import raise_open_files
from tests.support.servers.tls import self_signed_certificate
from vnode.kubelet.limits import Limits
from vnode.kubelet.wsgilistener import POOL_THREADS

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
    # The loader the kubelet and console listeners use: a ValueError that names the file.
    with pytest.raises(ValueError, match="tls.crt holds no PEM certificate"):
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


# -- I7: the bounds of the kubelet and console listeners ---------------------------------------
HALF_SENT = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # the head never ends
THOUSAND = 1000


def threads() -> tuple[int, int]:
    """The process's threads, as Python counts them and as the kernel does."""
    return threading.active_count(), len(os.listdir("/proc/self/task"))


def closed_by_server(sock: socket.socket) -> bytes:
    """What the server said before it closed `sock` (a refusal at accept says nothing)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def connect_from(source: str, port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))


def scrape_from(source: str, port: int) -> bytes:
    with connect_from(source, port) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return closed_by_server(sock)


def test_I7_a_thousand_half_sent_metrics_requests_hold_no_thread_each_and_are_closed_by_the_head_timeout() -> None:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2 * THOUSAND + 256:
        pytest.skip("the hard limit on open files is too low for 1,000 connections at both ends")
    raise_open_files()
    bounds = Limits(head_timeout=5.0, per_client=THOUSAND + 4, total=THOUSAND + 8)
    listener = MetricsListener("127.0.0.1", 0, bounds=bounds)
    listener.start()
    url = f"http://127.0.0.1:{listener.port}/metrics"
    selector = selectors.DefaultSelector()
    said: dict[socket.socket, bytes] = {}
    try:
        assert get(url)[0] == 200  # the pool has its first thread
        before = threads()
        for _ in range(THOUSAND):
            sock = socket.create_connection(("127.0.0.1", listener.port), timeout=30)
            sock.sendall(HALF_SENT)
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        wait_for(lambda: listener.held() == THOUSAND, timeout=60, what="the 1,000 connections held at once")
        held = threads()
        status, body = get(url)  # a scrape still answers meanwhile (the caps leave room for it)
        assert status == 200 and "nebula_leader" in body
        during = threads()
        bound = (before[0] + POOL_THREADS, before[1] + POOL_THREADS)
        assert held[0] <= bound[0] and held[1] <= bound[1], (before, held)  # no thread per connection
        assert during[0] <= bound[0] and during[1] <= bound[1], (before, during)

        def drained() -> bool:
            for key, _ in selector.select(0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    chunk = sock.recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    chunk = b""
                said[sock] = said.get(sock, b"") + chunk
                if not chunk:  # closed by the server
                    selector.unregister(sock)
                    sock.close()
            return not selector.get_map()

        wait_for(drained, timeout=120, interval=0, what="every half-sent connection closed by the server")
        assert len(said) == THOUSAND
        answers = {data[:28] for data in said.values()}
        assert answers <= {b"", b"HTTP/1.1 408 Request Timeout"}, answers
        wait_for(lambda: listener.held() == 0, what="the listener holding no connection")
        assert get(url)[0] == 200
    finally:
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        listener.stop()


def test_I7_the_metrics_listener_refuses_connections_past_per_client_and_total(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener = MetricsListener("127.0.0.1", 0, bounds=Limits(per_client=3, total=5))
    listener.start()
    port = listener.port
    held: list[socket.socket] = []
    try:
        held += [connect_from("127.0.0.1", port) for _ in range(3)]
        wait_for(lambda: listener.held() == 3, what="3 connections held from 127.0.0.1")
        with connect_from("127.0.0.1", port) as fourth:
            assert closed_by_server(fourth) == b""  # refused at accept: closed, nothing read or said
        assert scrape_from("127.0.0.1", port) == b""
        assert scrape_from("127.0.0.2", port).startswith(b"HTTP/1.1 200 OK")  # another client is not capped
        held += [connect_from("127.0.0.2", port) for _ in range(2)]
        wait_for(lambda: listener.held() == 5, what="5 connections held in all")
        assert scrape_from("127.0.0.3", port) == b""  # the listener's total
        assert "metrics listener: refused 1 connection(s) over the caps (3 per client, 5 in all, " in caplog.text
        held.pop(0).close()
        wait_for(lambda: listener.held() == 4, what="a closed connection released")
        assert scrape_from("127.0.0.1", port).startswith(b"HTTP/1.1 200 OK")
    finally:
        for sock in held:
            sock.close()
        listener.stop()


def test_I7_an_idle_kept_alive_metrics_connection_is_closed_after_the_keepalive_timeout() -> None:
    listener = MetricsListener("127.0.0.1", 0, bounds=Limits(keepalive_timeout=2.0))
    listener.start()
    connection = http.client.HTTPConnection("127.0.0.1", listener.port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        assert connection.getresponse().read() and connection.sock is not None
        sock = connection.sock
        connection.request("GET", "/metrics")  # kept alive: the same connection answers again
        response = connection.getresponse()
        assert response.status == 200 and response.read() and connection.sock is sock
        assert sock.recv(1) == b""  # then closed, silently, once keepalive_timeout passes (30 s: TimeoutError)
        wait_for(lambda: listener.held() == 0, what="the listener holding no connection")
    finally:
        connection.close()
        listener.stop()


def test_I7_a_metrics_request_body_over_the_small_limit_is_413_before_it_is_read() -> None:
    bounds = Limits()
    listener = MetricsListener("127.0.0.1", 0, bounds=bounds)
    listener.start()
    try:
        length = bounds.body_limit("metrics") + 1
        with socket.create_connection(("127.0.0.1", listener.port), timeout=30) as sock:
            sock.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length)
            answer = closed_by_server(sock)
        assert answer.startswith(b"HTTP/1.1 413 ") and b"limit of 16384 bytes" in answer, answer
    finally:
        listener.stop()


def test_an_ipv6_host_is_served() -> None:
    listener = MetricsListener("::", 0)
    try:
        listener.start()
    except OSError as exc:
        pytest.skip(f"no IPv6 here: {exc}")
    try:
        assert get(f"http://[::1]:{listener.port}/metrics")[0] == 200
    finally:
        listener.stop()
