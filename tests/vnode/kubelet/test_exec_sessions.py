"""exec and attach sessions against the fake provider, over SPDY (every protocol version)
and websocket (v5, v4, base64): exit codes, stream separation, resize, pings, refusals,
and the SPDY hand-off with bytes pipelined behind the request head."""

from __future__ import annotations

import json
import socket
import ssl
import time
from typing import Any

import pytest
import websocket
from kubernetes import client as k8s
from kubernetes.stream import ws_client

from tests.support.clients.spdy import SpdyClient, UpgradeRefused
from tests.support.rigs.offline import adopt_new_pod
from vnode.handler import Handler
from vnode.kubelet import spdy
from vnode.kubelet.server import Listeners

TLS = ssl._create_unverified_context()


@pytest.fixture(scope="module")
def fake_pod(fake_handler: Handler) -> str:
    adopt_new_pod(fake_handler, "shell")
    return "shell"


def spdy_exec(port: int, path: str, protocols: tuple[str, ...], **streams: bool) -> tuple[str, Any]:
    with SpdyClient.connect(("127.0.0.1", port), path, protocols=protocols, ssl_context=TLS) as client:
        opened = client.open_exec(**streams)
        return client.protocol or "", client.communicate(opened, stdin=b"hello\n")


@pytest.mark.parametrize("protocol", ["v5.channel.k8s.io", "v4.channel.k8s.io"])
def test_spdy_v4_and_v5_report_the_exit_code_and_keep_stdout_and_stderr_apart(
    server: Listeners, fake_pod: str, protocol: str
) -> None:
    chosen, result = spdy_exec(server.kubelet_port, f"/exec/default/{fake_pod}/main?command=both&error=1&output=1",
                               (protocol, "v3.channel.k8s.io"), stdin=False)  # fmt: skip
    assert chosen == protocol
    assert result.stdout == b"to-stdout\n" and result.stderr == b"to-stderr\n"
    status = json.loads(result.error)
    assert status["reason"] == "NonZeroExitCode" and status["details"]["causes"][0] == {
        "reason": "ExitCode",
        "message": "3",
    }


@pytest.mark.parametrize("protocol", ["v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"])
def test_older_spdy_versions_carry_plain_text_errors_only(server: Listeners, fake_pod: str, protocol: str) -> None:
    _, ok = spdy_exec(server.kubelet_port, f"/exec/default/{fake_pod}/main?command=cat&input=1&output=1",
                      (protocol,), stdin=True, stderr=False)  # fmt: skip
    assert ok.stdout == b"hello\n" and ok.error == b""
    _, failed = spdy_exec(server.kubelet_port, f"/exec/default/{fake_pod}/main?command=both&output=1&error=1",
                          (protocol,))  # fmt: skip
    assert failed.error.startswith(b"command terminated with non-zero exit code")


def test_a_tty_session_forwards_resizes_and_answers_pings(server: Listeners, fake_pod: str) -> None:
    path = f"/exec/default/{fake_pod}/main?command=stty&command=size&input=1&output=1&tty=1"
    with SpdyClient.connect(("127.0.0.1", server.kubelet_port), path, ssl_context=TLS) as client:
        streams = client.open_exec(stdin=True, tty=True)
        client.ping(1)
        client.send(streams["resize"], b'{"Width":100,"Height":30}\n')
        result = client.communicate(streams)
    assert result.stdout.strip() == b"30 100"
    assert json.loads(result.error)["status"] == "Success"


def test_refused_upgrades_answer_before_the_101(server: Listeners, fake_pod: str) -> None:
    address = ("127.0.0.1", server.kubelet_port)
    path = f"/exec/default/{fake_pod}/main?command=ls&output=1"
    with pytest.raises(UpgradeRefused) as unknown:
        SpdyClient.connect(address, path, protocols=["portforward.k8s.io"], ssl_context=TLS)
    assert unknown.value.status == 403
    accepted = [v for k, v in unknown.value.headers if k.lower() == "x-accepted-stream-protocol-versions"]
    assert "v4.channel.k8s.io" in accepted
    with pytest.raises(UpgradeRefused) as missing:
        SpdyClient.connect(address, path, protocols=[], ssl_context=TLS)
    assert missing.value.status == 400 and b"X-Stream-Protocol-Version is required" in missing.value.body
    with pytest.raises(UpgradeRefused) as absent:
        SpdyClient.connect(address, "/exec/default/absent/main?command=ls&output=1", ssl_context=TLS)
    assert absent.value.status == 404 and b"not on a node served here" in absent.value.body


def test_frames_pipelined_behind_the_request_head_are_not_lost(server: Listeners, fake_pod: str) -> None:
    session = spdy.ClientSession()
    _, syn = session.open([("streamtype", "error")])
    head = (
        f"POST /exec/default/{fake_pod}/main?command=true&output=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
        "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
    ).encode()
    with TLS.wrap_socket(socket.create_connection(("127.0.0.1", server.kubelet_port), timeout=30)) as sock:
        sock.sendall(head + syn)  # one TLS record: the SYN_STREAM arrives with the request
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        _, rest = received.split(b"\r\n\r\n", 1)
        events: list[spdy.ClientEvent] = session.receive(rest) if rest else []
        while not any(isinstance(e, spdy.StreamReplied) for e in events):
            events += session.receive(sock.recv(65536))


def test_spdy_attach_reaches_the_workload_and_echoes_its_input(server: Listeners, fake_pod: str) -> None:
    _, result = spdy_exec(server.kubelet_port, f"/attach/default/{fake_pod}/main?input=1&output=1",
                          ("v4.channel.k8s.io",), stdin=True, stderr=False)  # fmt: skip
    assert result.stdout == b"hello\n"


def _ws_config(port: int) -> Any:
    config = k8s.Configuration()
    config.host = f"https://127.0.0.1:{port}"
    config.verify_ssl = False
    return config


def close_ws_client(client: Any) -> None:
    """WSClient.close leaves its socket open once the server has closed the session."""
    client.close()
    client.sock.shutdown()


def test_the_python_clients_websocket_exec_gets_output_and_exit_codes(server: Listeners, fake_pod: str) -> None:
    base = f"wss://127.0.0.1:{server.kubelet_port}/exec/default/{fake_pod}/main"
    client = ws_client.WSClient(_ws_config(server.kubelet_port), f"{base}?command=both&output=1&error=1",
                                headers=None, capture_all=True)  # fmt: skip
    try:
        client.run_forever(timeout=30)
        assert client.read_stdout() == "to-stdout\n" and client.read_stderr() == "to-stderr\n"
        assert client.returncode == 3
    finally:
        close_ws_client(client)
    client = ws_client.WSClient(_ws_config(server.kubelet_port), f"{base}?command=cat&input=1&output=1",
                                headers=None, capture_all=True)  # fmt: skip
    try:
        client.write_stdin("typed\n")
        client.close_channel(0)  # v5: stdin EOF, so cat ends
        client.run_forever(timeout=30)
        assert client.read_stdout() == "typed\n" and client.returncode == 0
    finally:
        close_ws_client(client)


def test_base64_websocket_frames_carry_the_channel_as_a_digit(server: Listeners, fake_pod: str) -> None:
    url = f"wss://127.0.0.1:{server.kubelet_port}/exec/default/{fake_pod}/main?command=both&output=1&error=1"
    conn = websocket.create_connection(
        url, subprotocols=["v4.base64.channel.k8s.io"], sslopt={"cert_reqs": ssl.CERT_NONE}, timeout=30
    )
    frames: list[str] = []
    try:
        assert conn.subprotocol == "v4.base64.channel.k8s.io"
        while True:
            opcode, data = conn.recv_data()
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                break
            frames.append(data.decode())
    finally:
        conn.close()
        conn.shutdown()  # websocket-client leaves the socket open after a server-side Close
    assert frames[0] == "1"  # the empty "ready" frame on stdout
    assert "1dG8tc3Rkb3V0Cg==" in frames and "2dG8tc3RkZXJyCg==" in frames  # base64 of to-stdout\n, to-stderr\n
    assert any(f.startswith("3") and b"NonZeroExitCode" in __import__("base64").b64decode(f[1:]) for f in frames)


def test_a_websocket_for_an_unknown_pod_is_refused_so_kubectl_falls_back(server: Listeners) -> None:
    url = f"wss://127.0.0.1:{server.kubelet_port}/exec/default/absent/main?command=ls&output=1"
    conn = websocket.WebSocket(sslopt={"cert_reqs": ssl.CERT_NONE})
    try:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            conn.connect(url, subprotocols=["v5.channel.k8s.io"], timeout=30)
    finally:
        conn.close()
    assert refused.value.status_code == 403


def test_a_websocket_client_slow_to_answer_the_close_still_reads_the_status(server: Listeners, fake_pod: str) -> None:
    """The server's Close waits 1 s for the client's; past that the connection ends with a
    FIN, as a kubelet's does, never a reset, which would throw away the status frame still
    unread in the client's (or a proxy's) receive buffer: kubectl then sees close 1006."""
    url = f"wss://127.0.0.1:{server.kubelet_port}/exec/default/{fake_pod}/main?command=both&output=1&error=1"
    conn = websocket.create_connection(
        url, subprotocols=["v4.channel.k8s.io"], sslopt={"cert_reqs": ssl.CERT_NONE}, timeout=30
    )
    frames: list[bytes] = []
    try:
        time.sleep(2.5)  # a client too busy to read, past the server's close handshake timeout
        while True:
            opcode, data = conn.recv_data(control_frame=True)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                break
            frames.append(data)
    finally:
        conn.shutdown()  # type: ignore[no-untyped-call]
    assert any(f.startswith(b"\x03") and b"NonZeroExitCode" in f for f in frames), frames
