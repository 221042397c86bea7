"""I7: the process-wide cap on exec and attach sessions (`Limits.sessions_total`,
vnode/kubelet/upgrade.py for SPDY, vnode/kubelet/wsexec.py for websockets), over real TLS
sockets against the fake provider: a session past the cap is refused alone (SPDY: 503 with
Retry-After and the cap's text; websocket: 403 before the handshake, so kubectl falls back to
SPDY and reads the text there), the open ones keep working, every place comes back."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator

import pytest
import websocket

from tests.support.clients.spdy import SpdyClient, UpgradeRefused
from tests.support.polling import wait_for
from tests.support.rigs.offline import adopt_new_pod
from tests.support.rigs.vnode import loopback_listeners
from tests.support.servers.tls import read_head
from vnode.handler import Handler
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import Listeners

TLS = ssl._create_unverified_context()


@pytest.fixture(scope="module")
def capped(registry: HandlerRegistry) -> Iterator[Listeners]:
    with loopback_listeners(registry, Limits(sessions_total=2)) as running:
        yield running


@pytest.fixture(scope="module")
def attach(fake_handler: Handler) -> str:
    adopt_new_pod(fake_handler, "capped-sessions")
    return "/attach/default/capped-sessions/main?input=1&output=1"


def spdy_session(port: int, path: str) -> tuple[SpdyClient, dict[str, int]]:
    client = SpdyClient.connect(("127.0.0.1", port), path, ssl_context=TLS)
    return client, client.open_exec(stdin=True, stderr=False)


def spdy_echoes(client: SpdyClient, streams: dict[str, int], word: bytes) -> None:
    before = len(client.received(streams["stdout"]))
    client.send(streams["stdin"], word + b"\n")
    client.wait_for(lambda: word in client.received(streams["stdout"])[before:], "the echo")


def ws_session(port: int, path: str) -> websocket.WebSocket:
    return websocket.create_connection(
        f"wss://127.0.0.1:{port}{path}",
        subprotocols=["v4.channel.k8s.io"],
        sslopt={"cert_reqs": ssl.CERT_NONE},
        timeout=30,
    )


def ws_echoes(conn: websocket.WebSocket, word: bytes) -> None:
    conn.send_binary(b"\x00" + word + b"\n")
    echoed = b""
    while word not in echoed:
        echoed += conn.recv_data()[1]


def ws_handshake_status(port: int, path: str) -> bytes:
    """The status line a websocket exec handshake gets."""
    with TLS.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30)) as sock:
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: Upgrade", "Upgrade: websocket"]
        lines += ["Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
        lines += ["Sec-WebSocket-Protocol: v4.channel.k8s.io"]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = read_head(sock)
    assert head is not None
    return head[0].split(b"\r\n", 1)[0]


def test_I7_exec_sessions_past_the_process_wide_cap_are_refused_alone(capped: Listeners, attach: str) -> None:
    port, places = capped.kubelet_port, capped.streams.sessions
    spdy, streams = spdy_session(port, attach)
    ws = ws_session(port, attach)
    try:
        wait_for(lambda: places.open == 2, what="both sessions holding a place")
        with pytest.raises(UpgradeRefused) as refused:  # a third over SPDY
            spdy_session(port, attach)
        assert refused.value.status == 503
        assert dict((k.lower(), v) for k, v in refused.value.headers)["retry-after"] == "5"
        status = json.loads(refused.value.body)
        assert status["message"] == places.refusal() and status["code"] == 503
        assert b" 403 " in ws_handshake_status(port, attach) + b" "  # a third over websocket
        assert places.refused == 2 and places.open == 2
        spdy_echoes(spdy, streams, b"still-here")  # the open sessions live on
        ws_echoes(ws, b"still-here")
    finally:
        spdy.close()
        ws.close()
    wait_for(lambda: places.open == 0, what="every place given back", timeout=60)
    again, streams = spdy_session(port, attach)  # a place again
    with again:
        spdy_echoes(again, streams, b"again")
    wait_for(lambda: places.open == 0, what="the place given back again", timeout=60)


def test_I7_a_session_that_never_sets_up_its_streams_gives_its_place_back(capped: Listeners, attach: str) -> None:
    places = capped.streams.sessions
    wait_for(lambda: places.open == 0, what="no session left from before", timeout=60)
    bare = SpdyClient.connect(("127.0.0.1", capped.kubelet_port), attach, ssl_context=TLS)  # 101, no streams
    wait_for(lambda: places.open == 1, what="the bare session's place")
    bare.close()
    wait_for(lambda: places.open == 0, what="the place given back at close", timeout=60)
