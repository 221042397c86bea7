"""The two listeners over real TLS and HTTP: which routes each serves (I5), containerLogs
validation and streaming, the 404s with reasons, and client certificates."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import (
    BlockScope,
    Capabilities,
    Instance,
    InstanceId,
    LogOptions,
    Offering,
    PodSpec,
    ProvisionRequest,
    ProvisionResult,
    Tier,
)
from providers.fake import FakeProvider
from tests.support.polling import wait_for
from tests.support.rigs.offline import adopt_new_pod, offline_handler
from tests.support.servers.tls import https_get, kubelet_connection, self_signed_certificate
from vnode.handler import Handler
from vnode.kubelet import auth, certs
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners


def test_I5_the_kubelet_listener_serves_only_kubelet_routes_and_the_console_only_django(
    server: Listeners, fake_handler: Handler
) -> None:
    adopt_new_pod(fake_handler, "i5")
    assert https_get(server.kubelet_port, "/admin/")[0] == 404
    assert https_get(server.kubelet_port, "/admin/login/")[0] == 404
    assert https_get(server.kubelet_port, "/containerLogs/default/i5/main?tailLines=1")[0] == 200
    console = http.client.HTTPConnection("127.0.0.1", server.console_port or 0, timeout=30)
    try:
        console.request("GET", "/containerLogs/default/i5/main")
        assert console.getresponse().status == 404
    finally:
        console.close()
    console = http.client.HTTPConnection("127.0.0.1", server.console_port or 0, timeout=30)
    try:
        console.request("GET", "/healthz")
        response = console.getresponse()
        assert response.status == 200 and response.read() == b"ok"
    finally:
        console.close()


def upgrade_status(port: int, path: str, *, tls: bool) -> tuple[int, bytes]:
    """A websocket handshake for `path` as kubectl sends one: the status and body answered."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock = ssl._create_unverified_context().wrap_socket(raw) if tls else raw
    with sock:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n".encode()
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head[9:12]), body


def test_I5_a_websocket_upgrade_on_the_wrong_listener_or_path_is_a_404_not_a_403(
    server: Listeners, fake_handler: Handler
) -> None:
    adopt_new_pod(fake_handler, "i5ws")
    exec_path = "/exec/default/i5ws/main?command=ls&stdout=1"
    assert server.console_port
    assert upgrade_status(server.console_port, exec_path, tls=False) == (404, b"404 request not found")
    assert upgrade_status(server.console_port, "/admin/", tls=False)[0] == 404
    assert upgrade_status(server.kubelet_port, "/admin/", tls=True) == (404, b"404 request not found")
    assert upgrade_status(server.kubelet_port, exec_path, tls=True)[0] == 101  # the right listener still upgrades


def test_healthz_pods_runningpods_stats_and_metrics_answer(server: Listeners, fake_handler: Handler) -> None:
    adopt_new_pod(fake_handler, "listed")
    assert https_get(server.kubelet_port, "/healthz")[2] == b"ok"
    status, headers, body = https_get(server.kubelet_port, "/pods")
    pods = json.loads(body)
    assert status == 200 and headers["content-type"] == "application/json" and pods["kind"] == "PodList"
    assert "listed" in {p["metadata"]["name"] for p in pods["items"]}
    running = json.loads(https_get(server.kubelet_port, "/runningpods/")[2])
    assert "listed" in {p["metadata"]["name"] for p in running["items"]}
    summary = json.loads(https_get(server.kubelet_port, "/stats/summary")[2])
    assert {"name": "listed", "namespace": "default"}.items() <= next(
        p["podRef"] for p in summary["pods"] if p["podRef"]["name"] == "listed"
    ).items()
    status, headers, _ = https_get(server.kubelet_port, "/metrics/resource")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")


def test_container_logs_honour_tail_limit_and_timestamps(server: Listeners, fake_handler: Handler) -> None:
    adopt_new_pod(fake_handler, "logger")
    wait_for(lambda: https_get(server.kubelet_port, "/containerLogs/default/logger/main")[2].count(b"\n") >= 4)
    status, headers, body = https_get(server.kubelet_port, "/containerLogs/default/logger/main?tailLines=3")
    assert status == 200 and body.count(b"\n") == 3 and headers["transfer-encoding"] == "chunked"
    assert len(https_get(server.kubelet_port, "/containerLogs/default/logger/main?limitBytes=7")[2]) == 7
    stamped = https_get(server.kubelet_port, "/containerLogs/default/logger/main?tailLines=1&timestamps=true")[2]
    assert stamped[:4].isdigit() and b"Z fake instance" in stamped


def test_a_followed_log_streams_chunks_as_they_come_and_a_disconnect_ends_it(
    server: Listeners, fake_handler: Handler
) -> None:
    adopt_new_pod(fake_handler, "follower")
    connection = kubelet_connection(server.kubelet_port)
    connection.request("GET", "/containerLogs/default/follower/main?follow=true&tailLines=0")
    response = connection.getresponse()
    seen = b""
    while seen.count(b"\n") < 5:  # lines appear every 50 ms: only a streaming response delivers them
        seen += response.read1(65536)
    connection.close()


@pytest.mark.parametrize(
    ("query", "message"),
    [("tailLines=-1", '"tailLines" is -1'), ("sinceSeconds=1&sinceTime=2024-01-01T00:00:00Z", "both")],
)
def test_bad_log_parameters_are_a_400_status(
    server: Listeners, fake_handler: Handler, query: str, message: str
) -> None:
    adopt_new_pod(fake_handler, "validated")
    status, headers, body = https_get(server.kubelet_port, f"/containerLogs/default/validated/main?{query}")
    assert status == 400 and headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["kind"] == "Status" and answer["code"] == 400 and message in answer["message"]


def test_missing_pods_containers_instances_and_capabilities_are_404s_with_a_reason(
    server: Listeners, registry: HandlerRegistry, fake_handler: Handler
) -> None:
    adopt_new_pod(fake_handler, "present")

    def reason(path: str) -> str:
        status, _, body = https_get(server.kubelet_port, path)
        assert status == 404, body
        return str(json.loads(body)["message"])

    assert "not on a node served here" in reason("/containerLogs/default/absent/main")
    assert 'container "other" not found' in reason("/containerLogs/default/present/other")
    assert "not on a node served here" in reason("/portForward/default/absent")  # 400 for a present Pod: no upgrade
    pending = {"metadata": {"namespace": "default", "name": "pending", "uid": "u"}, "spec": {"containers": [{}]}}
    fake_handler.context.tracked.track(pending)  # tracked, but provision has not returned yet
    assert "has no instance yet" in reason("/containerLogs/default/pending/main")
    bare = offline_handler(BareProvider(f"bare-{uuid.uuid4().hex}"))
    registry.add(bare)
    try:
        adopt_new_pod(bare, "bare")
        assert "does not support logs" in reason("/containerLogs/default/bare/main")
    finally:
        registry.remove(bare)
    assert https_get(server.kubelet_port, "/exec/default/present/main?command=ls&output=1")[0] == 400


class BareProvider:
    """A provider with no LogStreamer, Executor or Attacher: the edge must say so (404)."""

    def __init__(self, cloud: str) -> None:
        self._fake = FakeProvider("bare", {"cloud": cloud})
        self.name = "bare"

    def capabilities(self) -> Capabilities:
        return self._fake.capabilities()

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        return self._fake.provision(pod, request)

    def terminate(self, instance_id: InstanceId) -> None:
        self._fake.terminate(instance_id)

    def get(self, instance_id: InstanceId) -> Instance | None:
        return self._fake.get(instance_id)

    def list(self) -> list[Instance]:
        return self._fake.list()

    def offerings(self) -> list[Offering]:
        return self._fake.offerings()

    def expand_regions(self, declared: Sequence[str]) -> list[str]:
        return self._fake.expand_regions(declared)

    def classify_provision_error(
        self, err: errors.ProviderError, *, accelerator: str | None, tier: Tier | None, region: str | None
    ) -> BlockScope:
        return self._fake.classify_provision_error(err, accelerator=accelerator, tier=tier, region=region)


@pytest.fixture(scope="module")
def client_ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[certs.KeyPair, Path]:
    ca = certs.make_ca("test-client-ca")
    path = tmp_path_factory.mktemp("ca") / "client-ca.pem"
    path.write_bytes(ca.cert_pem)
    return ca, path


def _client_context(tmp_path: Path, pair: certs.KeyPair | None) -> ssl.SSLContext:
    context = ssl._create_unverified_context()
    if pair is not None:
        (tmp_path / "client.pem").write_bytes(pair.cert_pem)
        (tmp_path / "client.key").write_bytes(pair.key_pem)
        context.load_cert_chain(tmp_path / "client.pem", tmp_path / "client.key")
    return context


def test_with_a_client_ca_only_clients_with_a_certificate_it_signed_get_in(
    tmp_path: Path, client_ca: tuple[certs.KeyPair, Path], fake_handler: Handler
) -> None:
    """The certificate is asked for, not required at the handshake (as a kubelet asks): no
    certificate or one another CA signed is a 401 once anonymous requests are refused."""
    ca, path = client_ca
    certificates_only = auth.KubeletAuth(anonymous=False, authorization=auth.ALWAYS_ALLOW, token_auth=False)
    guarded = Listeners(
        HandlerRegistry([fake_handler]),
        kubelet=ListenerConfig("127.0.0.1", 0),
        client_ca=str(path),
        kubelet_auth=certificates_only,
    )
    guarded.start()
    try:
        signed = certs.issue(ca, "kube-apiserver-kubelet-client", client=True)
        assert https_get(guarded.kubelet_port, "/healthz", context=_client_context(tmp_path, signed))[0] == 200
        assert https_get(guarded.kubelet_port, "/healthz", context=_client_context(tmp_path, None))[0] == 401
        stranger = certs.issue(certs.make_ca("another-ca"), "intruder", client=True)
        assert https_get(guarded.kubelet_port, "/healthz", context=_client_context(tmp_path, stranger))[0] == 401
    finally:
        guarded.stop()


def test_the_serving_certificate_names_the_node_ip(server: Listeners) -> None:
    assert server.kubelet_ca is not None
    context = ssl.create_default_context(cadata=server.kubelet_ca.cert_pem.decode())
    assert https_get(server.kubelet_port, "/healthz", context=context)[0] == 200  # hostname 127.0.0.1 verified


def test_a_bad_client_ca_bundle_fails_at_start(tmp_path: Path) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate")
    broken = Listeners(HandlerRegistry(), kubelet=ListenerConfig("127.0.0.1", 0), client_ca=str(tmp_path / "bad.pem"))
    with pytest.raises(ValueError, match="no PEM certificate"):
        broken.start()


def _rsa_pair(tmp_path: Path, host: str) -> tuple[Path, Path]:
    """A self-signed RSA serving certificate as cert-manager would mount it (tls.crt, tls.key)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = self_signed_certificate(key, "nebula-console.nebula-system.svc", ip=host, ca=True)
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def tls_console(app: Callable[..., Any] | None, cert_path: Path, key_path: Path) -> Listeners:
    """Listeners (not started) whose console serves `app` over TLS with the mounted files."""
    return Listeners(
        HandlerRegistry(),
        kubelet=ListenerConfig("127.0.0.1", 0),
        console=ListenerConfig("127.0.0.1", 0),
        console_app=app,
        console_tls=True,
        console_cert=(str(cert_path), str(key_path)),
    )


def test_the_console_serves_a_mounted_certificate_for_the_webhook(tmp_path: Path) -> None:
    """--console-cert/--console-key: the console presents the files' certificate (RSA, as
    cert-manager issues by default), so the API server's caBundle can verify it."""
    cert_path, key_path = _rsa_pair(tmp_path, "127.0.0.1")

    async def console(scope: dict[str, object], receive: object, send: object) -> None:  # a minimal ASGI app
        assert callable(send)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"console"})

    served = tls_console(console, cert_path, key_path)
    served.start()
    try:
        assert served.console_port is not None
        context = ssl.create_default_context(cafile=str(cert_path))
        assert https_get(served.console_port, "/healthz", context=context)[2] == b"console"
    finally:
        served.stop()


def test_an_unreadable_console_certificate_fails_at_start(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    broken = tls_console(None, tmp_path / "tls.crt", tmp_path / "tls.key")
    with pytest.raises(ValueError, match="no PEM certificate"):
        broken.start()


class EndlessLog:
    """A log that never ends, counting what the server has read of it."""

    LINE = b"x" * 1023 + b"\n"

    def __init__(self) -> None:
        self.read_bytes = 0
        self.closed = threading.Event()

    def read(self, max_bytes: int = 65536) -> bytes:
        if self.closed.is_set():
            return b""
        data = self.LINE * max(1, max_bytes // len(self.LINE))
        self.read_bytes += len(data)
        return data

    def close(self) -> None:
        self.closed.set()


class EndlessLogProvider(BareProvider):
    def __init__(self, cloud: str) -> None:
        super().__init__(cloud)
        self.streams: list[EndlessLog] = []

    def logs(self, instance_id: InstanceId, options: LogOptions) -> EndlessLog:
        self.streams.append(EndlessLog())
        return self.streams[-1]


def test_a_client_that_stops_reading_stops_the_log_being_read(server: Listeners, registry: HandlerRegistry) -> None:
    """Backpressure: the provider's stream is read no faster than the client takes it, so
    a stalled `kubectl logs` holds a few socket buffers, not the whole log, in memory."""
    provider = EndlessLogProvider(f"endless-{uuid.uuid4().hex}")
    handler = offline_handler(provider)
    registry.add(handler)
    try:
        adopt_new_pod(handler, "endless")
        raw = socket.create_connection(("127.0.0.1", server.kubelet_port))
        with ssl._create_unverified_context().wrap_socket(raw) as sock:
            sock.sendall(b"GET /containerLogs/default/endless/main HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            stream = wait_for(lambda: provider.streams[0] if provider.streams else None)
            time.sleep(1.5)  # the client reads nothing: buffers fill, the server pauses
            paused_at = stream.read_bytes
            time.sleep(1.0)
            assert stream.read_bytes == paused_at, "the server kept reading for a client that does not"
            assert paused_at < 64 * 1024 * 1024  # socket and TLS buffers, not the log
            got = 0
            while got < 2 * paused_at + 8 * 1024 * 1024:  # reading again resumes the stream
                got += len(sock.recv(1 << 20))
            assert stream.read_bytes > paused_at
        wait_for(stream.closed.is_set)
    finally:
        registry.remove(handler)


def test_responses_on_a_kept_alive_connection_each_get_their_own_flow(server: Listeners, fake_handler: Handler) -> None:
    adopt_new_pod(fake_handler, "twice")
    connection = kubelet_connection(server.kubelet_port)
    try:
        bodies = []
        for _ in range(3):
            connection.request("GET", "/containerLogs/default/twice/main?tailLines=1")
            response = connection.getresponse()
            assert response.status == 200
            bodies.append(response.read())
        assert all(body.count(b"\n") == 1 for body in bodies), bodies
    finally:
        connection.close()
