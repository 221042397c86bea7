"""pods/{name}/portforward tunnelled: SPDY inside a websocket, unwrapped by the devcluster as
kube-apiserver's TunnelingHandler does. What real kubectl 1.32 and 1.37 send is captured
(the tunnel's entry is wrapped to record the request) and checked; a stand-in TLS kubelet
records what the devcluster dials it with and echoes the SPDY bytes; the websocket framing
and its bounds (I7) are checked frame by frame."""

from __future__ import annotations

import base64
import io
import os
import socket
import ssl
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster, tunnel
from tests.support.clients.kubectl import KUBECTL_137, KUBECTL_IMAGE
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_node, make_pod
from tests.support.polling import wait_for
from tests.support.servers import rawlisteners as tlsserver
from tests.support.servers.tls import read_head

PODS = "/api/v1/namespaces/default/pods"


class SpdyKubelet(tlsserver.StandInKubelet):
    """A TLS stand-in kubelet: records each request head; answers an upgrade with 101 (or
    with `refusal`, if set) and then echoes every byte."""

    def __init__(self) -> None:
        super().__init__(per_connection=True)
        self.refusal: bytes | None = None
        self.start()

    def answer(self, conn: ssl.SSLSocket, head: bytes, rest: bytes) -> None:
        if self.refusal is not None:
            conn.sendall(self.refusal)
            return
        tlsserver.upgrade_and_echo(conn, rest, protocol="portforward.k8s.io")


@pytest.fixture
def kubelet() -> Iterator[SpdyKubelet]:
    server = SpdyKubelet()
    yield server
    server.close()


@pytest.fixture
def cluster(tmp_path: Path, kubelet: SpdyKubelet) -> Iterator[DevCluster]:
    with DevCluster(kubeconfig_path=str(tmp_path / "kubeconfig"), scheduler_interval=0.05) as running:
        raw = Raw(running)
        assert raw.json("POST", "/api/v1/nodes", make_node("node-1", kubelet_port=kubelet.port))[0] == 201
        assert raw.json("POST", PODS, make_pod("web", spec={"nodeName": "node-1"}))[0] == 201
        merge = {"Content-Type": "application/merge-patch+json"}
        patched = raw.json("PATCH", f"{PODS}/web/status", {"status": {"phase": "Running"}}, headers=merge)
        assert patched[0] == 200, patched
        yield running


class WsClient:
    """A minimal websocket client over TLS: masked frames out, frames in."""

    def __init__(self, cluster: DevCluster, path: str, protocols: list[str]) -> None:
        raw = Raw(cluster)
        host, port = raw.host, raw.port
        self.sock = raw.context.wrap_socket(socket.create_connection((host, port), timeout=30), server_hostname=host)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket", "Connection: Upgrade"]
        lines += [f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"Sec-WebSocket-Protocol: {', '.join(protocols)}"]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        got = read_head(self.sock, 65536)
        assert got is not None
        self.head, rest = got[0].decode(), got[1]
        self.key = key
        self.reader = io.BufferedReader(_SockRaw(self.sock, rest))

    def __enter__(self) -> WsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.close()
        self.sock.close()

    def send(self, opcode: int, payload: bytes, *, masked: bool = True, length: int | None = None) -> None:
        size = len(payload) if length is None else length
        mask_bit = 0x80 if masked else 0
        if size < 126:
            head = struct.pack("!BB", 0x80 | opcode, mask_bit | size)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, mask_bit | 127, size)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if masked else payload
        self.sock.sendall(head + (mask if masked else b"") + body)

    def receive(self) -> tuple[int, bytes]:
        first = self.reader.read(2)
        size = first[1] & 0x7F
        if size == 126:
            size = int.from_bytes(self.reader.read(2), "big")
        elif size == 127:
            size = int.from_bytes(self.reader.read(8), "big")
        return first[0] & 0x0F, self.reader.read(size)


class _SockRaw(io.RawIOBase):
    def __init__(self, sock: Any, rest: bytes) -> None:
        self.sock, self.rest = sock, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.rest or self.sock.recv(len(buffer))
        self.rest = b""
        buffer[: len(data)] = data
        return len(data)


TUNNEL = "/api/v1/namespaces/default/pods/web/portforward?ports=8080"


def test_the_websocket_is_accepted_with_the_kubelets_protocol_and_relays_binary_messages(
    cluster: DevCluster, kubelet: SpdyKubelet
) -> None:
    with WsClient(cluster, TUNNEL, ["SPDY/3.1+portforward.k8s.io"]) as client:
        assert client.head.startswith("HTTP/1.1 101")
        assert "Sec-WebSocket-Protocol: SPDY/3.1+portforward.k8s.io" in client.head
        assert f"Sec-WebSocket-Accept: {tunnel.accept_key(client.key)}" in client.head
        dialed = kubelet.heads[0]
        assert dialed.startswith("POST /portForward/default/web?port=8080 HTTP/1.1")
        assert "Upgrade: SPDY/3.1" in dialed and "X-Stream-Protocol-Version: portforward.k8s.io" in dialed
        assert "sec-websocket" not in dialed.lower() and "Authorization" not in dialed
        client.send(tunnel.BINARY, b"\x80\x03\x00\x01spdy bytes")
        assert client.receive() == (tunnel.BINARY, b"\x80\x03\x00\x01spdy bytes")
        client.send(tunnel.PING, b"hi")
        assert client.receive() == (tunnel.PONG, b"hi")
        client.send(tunnel.CLOSE, struct.pack("!H", 1000))
        assert client.receive() == (tunnel.CLOSE, struct.pack("!H", 1000))


def test_a_kubelet_refusal_is_replayed_to_the_client(cluster: DevCluster, kubelet: SpdyKubelet) -> None:
    body = b'{"kind":"Status","code":404,"message":"pod not here"}'
    kubelet.refusal = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with WsClient(cluster, TUNNEL, ["SPDY/3.1+portforward.k8s.io"]) as client:
        assert client.head.startswith("HTTP/1.1 404")
        assert client.reader.read(len(body)) == body


def test_I7_unmasked_and_oversize_frames_end_the_tunnel_with_a_close_code(
    cluster: DevCluster, kubelet: SpdyKubelet
) -> None:
    with WsClient(cluster, TUNNEL, ["SPDY/3.1+portforward.k8s.io"]) as client:
        client.send(tunnel.BINARY, b"plain", masked=False)
        opcode, payload = client.receive()
        assert opcode == tunnel.CLOSE and payload[:2] == struct.pack("!H", 1002)
    with WsClient(cluster, TUNNEL, ["SPDY/3.1+portforward.k8s.io"]) as client:
        client.send(tunnel.BINARY, b"", length=tunnel.MAX_MESSAGE + 1)
        opcode, payload = client.receive()
        assert opcode == tunnel.CLOSE and payload[:2] == struct.pack("!H", 1009)


def test_only_kubernetes_spdy_subprotocols_are_tunnelled() -> None:
    ws = [("Upgrade", "websocket"), ("Sec-WebSocket-Protocol", "SPDY/3.1+portforward.k8s.io, v4.channel.k8s.io")]
    assert tunnel.tunnelled_protocols(ws) == ["portforward.k8s.io"]
    assert tunnel.tunnelled_protocols([("Upgrade", "websocket"), ("Sec-WebSocket-Protocol", "v4.channel.k8s.io")]) == []
    assert (
        tunnel.tunnelled_protocols([("Upgrade", "SPDY/3.1"), ("X-Stream-Protocol-Version", "portforward.k8s.io")]) == []
    )
    upstream = tunnel.spdy_headers([*ws, ("Sec-WebSocket-Key", "k"), ("User-Agent", "kubectl")], ["portforward.k8s.io"])
    assert upstream == [
        ("User-Agent", "kubectl"),
        ("Connection", "Upgrade"),
        ("Upgrade", "SPDY/3.1"),
        ("X-Stream-Protocol-Version", "portforward.k8s.io"),
    ]


@pytest.mark.parametrize("binary", [KUBECTL_IMAGE, KUBECTL_137], ids=["kubectl-image", "kubectl-1.37"])
def test_real_kubectl_asks_for_the_tunnel_and_speaks_spdy_inside(
    cluster: DevCluster, kubelet: SpdyKubelet, binary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture: kubectl 1.31+ asks for a websocket (version 13) with the subprotocol
    `SPDY/3.1+portforward.k8s.io` and no X-Stream-Protocol-Version, and no `ports=` in the
    URL; it prints "Forwarding from" only once the tunnel is up, which the devcluster made
    by dialing the kubelet with a SPDY upgrade."""
    if not os.path.exists(binary):
        pytest.fail(f"{binary} is missing (make tools)")
    captured: list[list[tuple[str, str]]] = []
    original = tunnel.forward

    def recording(client: Any, **kwargs: Any) -> None:
        captured.append(list(kwargs["headers"]))
        original(client, **kwargs)

    monkeypatch.setattr(tunnel, "forward", recording)
    kubeconfig = str(cluster.kubeconfig_path)
    env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=str(Path(kubeconfig).parent))
    args = [binary, "port-forward", "--address", "127.0.0.1", "pod/web", ":8080"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert process.stdout is not None
        assert b"Forwarding from 127.0.0.1:" in process.stdout.readline()
    finally:
        process.terminate()
        process.communicate(timeout=30)
    headers = {name.lower(): value for name, value in captured[0]}
    assert headers["upgrade"].lower() == "websocket" and "upgrade" in headers["connection"].lower()
    assert "SPDY/3.1+portforward.k8s.io" in headers["sec-websocket-protocol"]
    assert headers["sec-websocket-version"] == "13"
    assert "x-stream-protocol-version" not in headers  # the SPDY protocol rides in the subprotocol
    wait_for(lambda: kubelet.heads, 10)
    assert kubelet.heads[0].startswith("POST /portForward/default/web HTTP/1.1")  # kubectl sends no ports=
    assert "X-Stream-Protocol-Version: portforward.k8s.io" in kubelet.heads[0]
