"""SPDY tunnelled through a websocket, for `pods/{name}/portforward`, as kube-apiserver does it.

kubectl 1.31+ asks for a websocket with the subprotocol `SPDY/3.1+portforward.k8s.io`;
kube-apiserver (apiserver/pkg/util/proxy/streamtunnel.go) then dials the kubelet with a
plain SPDY upgrade (POST, `Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version: portforward.k8s.io`),
and once the kubelet has switched protocols it accepts the websocket, naming the tunnelled
protocol the kubelet chose, and relays the SPDY bytes carried in binary messages both
ways. A kubelet that refuses has its answer replayed to the client unchanged. Called by
the HTTP layer instead of `proxy.forward` for such a request; never buffers a stream.
Tests: tests/devcluster/test_portforward_tunnel.py.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import ssl
import struct
import threading

from devcluster import proxy

PREFIX = "SPDY/3.1+"
SUFFIX = ".k8s.io"
MAX_MESSAGE = 16 << 20  # I7: kubectl sends one SPDY frame (at most 32 KiB and a header) per message
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_DROPPED = {"sec-websocket-protocol", "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions"}
_DROPPED |= {"upgrade", "connection", "x-stream-protocol-version"}
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class FrameError(Exception):
    """The client broke the websocket framing rules; `code` is the close code to send."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def tunnelled_protocols(headers: list[tuple[str, str]]) -> list[str]:
    """The SPDY protocols a websocket request asks to tunnel (`SPDY/3.1+` stripped, only
    Kubernetes ones); empty when it is not a tunnelling request."""
    if not any(n.lower() == "upgrade" and v.strip().lower() == "websocket" for n, v in headers):
        return []
    offered = [p.strip() for n, v in headers if n.lower() == "sec-websocket-protocol" for p in v.split(",")]
    return [p[len(PREFIX) :] for p in offered if p.startswith(PREFIX) and p.endswith(SUFFIX)]


def spdy_headers(headers: list[tuple[str, str]], protocols: list[str]) -> list[tuple[str, str]]:
    """The client's headers turned into the kubelet's SPDY upgrade request (createSPDYRequest)."""
    kept = [(n, v) for n, v in headers if n.lower() not in _DROPPED]
    upgrade = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")]
    return kept + upgrade + [("X-Stream-Protocol-Version", p) for p in protocols]


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + _GUID).encode("latin-1")).digest()).decode()


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked (server) frame with FIN set."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return head + payload


def read_frame(rfile: proxy.ByteReader) -> tuple[int, bytes] | None:
    """(opcode, unmasked payload) of the client's next frame; None at EOF. Client frames
    must be masked and no longer than MAX_MESSAGE (FrameError otherwise)."""
    head = _read_exact(rfile, 2)
    if head is None:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if not head[1] & 0x80:
        raise FrameError(1002, "client frames must be masked")
    if head[0] & 0x70:
        raise FrameError(1002, "no websocket extension was negotiated")
    if length >= 126:
        extended = _read_exact(rfile, 2 if length == 126 else 8)
        if extended is None:
            return None
        length = int.from_bytes(extended, "big")
    if length > MAX_MESSAGE:
        raise FrameError(1009, f"a frame of {length} bytes exceeds the {MAX_MESSAGE} byte bound")
    mask = _read_exact(rfile, 4)
    payload = _read_exact(rfile, length) if length else b""
    if mask is None or payload is None:
        return None
    if length:
        key = (mask * (length // 4 + 1))[:length]
        payload = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(length, "big")
    return opcode, payload


def _read_exact(rfile: proxy.ByteReader, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        piece = rfile.read1(size - len(data))
        if not piece:
            return None
        data += piece
    return data


def forward(
    client: proxy.ClientConnection,
    *,
    host: str,
    port: int,
    target: str,
    headers: list[tuple[str, str]],
    tls_context: ssl.SSLContext | None = None,
    timeout: float = 30.0,
) -> None:
    """Dial the kubelet with the SPDY upgrade; on its 101 accept the websocket and relay;
    otherwise replay its answer. Raises `proxy.ProxyError` before anything reached the client."""
    protocols = tunnelled_protocols(headers)
    key = next((v.strip() for n, v in headers if n.lower() == "sec-websocket-key"), "")
    request = proxy._request_head(
        "POST", target, host, port, spdy_headers(headers, protocols), b"", True, proxy._peer_ip(client.sock)
    )
    upstream = proxy._Upstream(proxy._dial(host, port, tls_context, timeout))
    try:
        try:
            upstream.stream.sendall(request)
            status, head = upstream.read_response_head()
        except (OSError, ValueError) as exc:
            raise proxy.ProxyError(f"error talking to the kubelet at {host}:{port}: {exc}") from exc
        upstream.stream.raw.settimeout(None)
        if status != 101:
            proxy._relay_response(client, upstream, status, head, "POST")
            return
        answer = dict((n.lower(), v) for n, v in proxy._parse_headers(head))
        if "upgrade" not in answer.get("connection", "").lower() or "spdy/3.1" not in answer.get("upgrade", "").lower():
            raise proxy.ProxyError("unable to upgrade: missing upgrade headers in response")
        chosen = answer.get("x-stream-protocol-version", "").strip()
        lines = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade"]
        lines.append(f"Sec-WebSocket-Accept: {accept_key(key)}")
        if chosen:
            lines.append(f"Sec-WebSocket-Protocol: {PREFIX}{chosen}")
        proxy._write(client, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        _relay(client, upstream, linger=timeout)
    finally:
        upstream.stream.raw.close()


def _relay(client: proxy.ClientConnection, upstream: proxy._Upstream, *, linger: float) -> None:
    """Binary messages from the client to the kubelet's SPDY bytes and back, until both
    directions end: the client's Close half-closes the kubelet connection, the kubelet's
    EOF becomes our Close. Pings are answered; a text message is a protocol error (1003)."""
    lock = threading.Lock()
    closed = threading.Event()  # we sent our Close frame

    def send(opcode: int, payload: bytes) -> None:
        with lock:
            if not closed.is_set():
                proxy._write(client, frame(opcode, payload))
                if opcode == CLOSE:
                    closed.set()

    def client_to_upstream() -> None:
        try:
            while (message := read_frame(client.rfile)) is not None:
                opcode, payload = message
                if opcode in (BINARY, CONTINUATION):
                    upstream.stream.sendall(payload)
                elif opcode == PING:
                    send(PONG, payload)
                elif opcode == CLOSE:
                    send(CLOSE, payload[:2])
                    break
                elif opcode != PONG:
                    raise FrameError(1003, "the tunnel carries binary messages only")
        except FrameError as exc:
            send(CLOSE, struct.pack("!H", exc.code) + str(exc).encode()[:120])
        finally:
            upstream.stream.close_write()

    def upstream_to_client() -> None:
        proxy._copy_down(upstream, lambda data: send(BINARY, data))
        send(CLOSE, struct.pack("!H", 1000))

    proxy._both_ways(client, upstream, client_to_upstream, upstream_to_client, linger=linger, name="kubelet-tunnel")
    proxy._shutdown(client.sock, socket.SHUT_WR)
