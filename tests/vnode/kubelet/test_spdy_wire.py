"""vnode.kubelet.spdy on real sockets: the test client (spdyclient) against a scripted kubelet
built on ServerSession, over plain TCP and TLS, and real kubectl 1.20 and 1.37 (SPDY) through
the devcluster's proxy to that same scripted kubelet. The scripted kubelet is `cat` with an
exit code: stdin comes back on stdout, `exit N` in the command sets the status."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from devcluster import DevCluster, tls
from kube.client import Kube, load_api_client, path_for
from tests.support.clients.spdy import SpdyClient, UpgradeRefused
from tests.support.factories import make_node, make_pod
from tests.support.servers import rawlisteners as tlsserver
from vnode.kubelet import spdy

ROOT = Path(__file__).resolve().parents[3]
KUBECTLS = {
    "1.20": ROOT / ".tools" / "kubectl-1.20" / "usr" / "bin" / "kubectl",
    "1.37": ROOT / ".venv" / "bin" / "kubectl",
}
SUPPORTED = ("v5.channel.k8s.io", "v4.channel.k8s.io")
SUCCESS = b'{"metadata":{},"status":"Success"}'


def status_for(exit_code: int) -> bytes:
    if exit_code == 0:
        return SUCCESS
    return json.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: exit status {exit_code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
        },
        separators=(",", ":"),
    ).encode()


class ScriptedKubelet(tlsserver.Listener):
    """Serves one connection at a time on its own thread: SPDY upgrade, then `cat`."""

    join_timeout = 30.0

    def __init__(self, context: ssl.SSLContext | None) -> None:
        super().__init__()
        self.context = context
        self.requests: list[str] = []
        self.errors: list[BaseException] = []
        self.start()

    def handle(self, raw: socket.socket) -> None:
        raw.settimeout(20)
        try:
            conn = self.context.wrap_socket(raw, server_side=True) if self.context else raw
            with conn:
                self._handle(conn)
        except (OSError, spdy.ProtocolError) as exc:
            self.errors.append(exc)
            raw.close()

    def _handle(self, conn: socket.socket) -> None:
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = conn.recv(4096)
            if not chunk:
                return
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.requests.append(lines[0])
        offered = [
            value.strip()
            for line in lines[1:]
            if line.lower().startswith("x-stream-protocol-version:")
            for value in line.split(":", 1)[1].split(",")
        ]
        chosen = next((protocol for protocol in offered if protocol in SUPPORTED), None)
        if chosen is None or "upgrade: websocket" in head.decode("latin-1").lower():
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 19\r\n\r\nno common protocols")
            return
        conn.sendall(
            f"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            f"X-Stream-Protocol-Version: {chosen}\r\n\r\n".encode()
        )
        query = parse_qs(urlsplit(lines[0].split(" ")[1]).query)
        self._run(conn, query, rest)

    def _run(self, conn: socket.socket, query: dict[str, list[str]], rest: bytes) -> None:
        flag = {name: query.get(name) == ["1"] for name in ("input", "output", "error", "tty")}
        expected = 1 + flag["input"] + flag["output"] + (flag["error"] and not flag["tty"]) + flag["tty"]
        command = query.get("command", [])
        exit_code = int(command[-1].split()[-1]) if command and command[-1].startswith("exit ") else 0
        session = spdy.ServerSession()
        streams: dict[str, int] = {}
        stdin_done = False
        chunk = rest
        while True:
            out = b""
            for event in session.receive(chunk):
                if isinstance(event, spdy.StreamOpened):
                    streams[dict(event.headers)["streamtype"]] = event.stream_id
                    out += session.reply(event.stream_id)
                elif isinstance(event, spdy.DataReceived) and event.stream_id == streams.get("stdin"):
                    out += session.send_data(streams["stdout"], event.data) if "stdout" in streams else b""
                    stdin_done = stdin_done or event.fin
                elif isinstance(event, spdy.PingReceived):
                    out += session.ping(event.ping_id)
            ready = len(streams) == expected
            if ready and (stdin_done or "stdin" not in streams):
                out += self._finish(session, streams, exit_code)
                conn.sendall(out)
                break
            if out:
                conn.sendall(out)
            chunk = conn.recv(65536)
            if not chunk:
                return
        while conn.recv(65536):  # let the client read everything, then see its close
            pass

    @staticmethod
    def _finish(session: spdy.ServerSession, streams: dict[str, int], exit_code: int) -> bytes:
        out = session.send_data(streams["stderr"], b"to-stderr\n") if "stderr" in streams else b""
        out += session.send_data(streams["error"], status_for(exit_code))
        for kind in ("stdout", "stderr", "error", "stdin", "resize"):
            if kind in streams:
                out += session.finish(streams[kind])
        return out + session.goaway()


@pytest.fixture(scope="module")
def credentials() -> tls.Credentials:
    return tls.make_credentials("127.0.0.1")


@pytest.fixture
def plain_kubelet() -> Iterator[ScriptedKubelet]:
    kubelet = ScriptedKubelet(None)
    yield kubelet
    kubelet.close()
    assert not kubelet.errors


@pytest.fixture
def tls_kubelet(credentials: tls.Credentials) -> Iterator[ScriptedKubelet]:
    kubelet = ScriptedKubelet(tls.server_context(credentials))
    yield kubelet
    kubelet.close()
    assert not kubelet.errors


def client_context(credentials: tls.Credentials) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=credentials.ca_pem.decode())


def test_five_megabytes_of_stdin_come_back_byte_exact_over_plain_tcp(plain_kubelet: ScriptedKubelet) -> None:
    payload = os.urandom(5 << 20)
    path = "/exec/default/p1/main?command=cat&error=1&input=1&output=1"
    with SpdyClient.connect(("127.0.0.1", plain_kubelet.port), path) as client:
        assert client.protocol == "v5.channel.k8s.io"
        streams = client.open_exec(stdin=True)
        client.ping(1)
        result = client.communicate(streams, payload)
        client.wait_for(lambda: client.goaway is not None, "GOAWAY")
    assert result.stdout == payload
    assert (result.stderr, result.error) == (b"to-stderr\n", SUCCESS)
    assert client.goaway == spdy.GoAwayReceived(streams["stderr"], 0)


def test_an_exit_code_arrives_on_the_error_stream_over_tls(
    tls_kubelet: ScriptedKubelet, credentials: tls.Credentials
) -> None:
    path = "/exec/default/p1/main?command=sh&command=-c&command=exit+3&error=1&output=1"
    with SpdyClient.connect(
        ("127.0.0.1", tls_kubelet.port), path, protocols=["v4.channel.k8s.io"], ssl_context=client_context(credentials)
    ) as client:
        assert client.protocol == "v4.channel.k8s.io"
        result = client.communicate(client.open_exec())
    cause = json.loads(result.error)["details"]["causes"][0]
    assert cause == {"reason": "ExitCode", "message": "3"}
    assert result.stdout == b"" and result.stderr == b"to-stderr\n"


def test_a_refused_upgrade_is_reported_with_its_status_and_body(plain_kubelet: ScriptedKubelet) -> None:
    with pytest.raises(UpgradeRefused) as refused:
        SpdyClient.connect(("127.0.0.1", plain_kubelet.port), "/exec/a/b/c?output=1", protocols=["v9.channel.k8s.io"])
    assert (refused.value.status, refused.value.body) == (403, b"no common protocols")


@pytest.fixture
def bound_pod(cluster: DevCluster, tls_kubelet: ScriptedKubelet) -> str:
    """A Node whose kubelet is the scripted one, and a Pod bound to it."""
    assert cluster.kubeconfig_path
    kube = Kube(load_api_client(cluster.kubeconfig_path))
    kube.create(path_for("nodes"), make_node("spdy-node", kubelet_port=tls_kubelet.port))
    kube.create(path_for("pods", namespace="default"), make_pod("p1", namespace="default", nodeName="spdy-node"))
    return cluster.kubeconfig_path


@pytest.mark.parametrize("version", sorted(KUBECTLS))
def test_real_kubectl_execs_through_our_spdy_session(version: str, bound_pod: str, tmp_path: Path) -> None:
    binary = KUBECTLS[version]
    if not binary.exists():
        pytest.skip(f"kubectl {version} is not installed at {binary} (run `make tools`)")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "KUBECONFIG": bound_pod}
    env["KUBECTL_REMOTE_COMMAND_WEBSOCKETS"] = "false"
    stdin = os.urandom(300_000)
    done = subprocess.run(
        [str(binary), "exec", "-i", "p1", "--", "cat"], input=stdin, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == stdin and done.stderr == b"to-stderr\n"
    failed = subprocess.run(
        [str(binary), "exec", "p1", "--", "sh", "-c", "exit 3"], env=env, capture_output=True, timeout=60
    )
    assert failed.returncode == 3, failed.stderr
    assert b"command terminated with exit code 3" in failed.stderr
