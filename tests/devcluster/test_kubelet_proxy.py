"""pods/{name}/log|exec through the server to a TLS stand-in kubelet: the rewritten path, a
streamed chunked answer, an upgrade pumped byte for byte, and the 4xx/5xx when it cannot."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import DevCluster
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_node, make_pod
from tests.support.servers import rawlisteners as tlsserver

PODS = "/api/v1/namespaces/default/pods"


class FakeKubelet(tlsserver.StandInKubelet):
    """A one-thread TLS server: answers a chunked log, or 101 and then echoes every byte."""

    def answer(self, conn: ssl.SSLSocket, head: bytes, rest: bytes) -> None:
        if b"upgrade: spdy/3.1" in head.lower():
            tlsserver.upgrade_and_echo(conn, rest)
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        for line in (b"line1\n", b"line2\n"):
            conn.sendall(b"%x\r\n%s\r\n" % (len(line), line))
        conn.sendall(b"0\r\n\r\n")


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    server = FakeKubelet()
    server.start()
    try:
        yield server
    finally:
        server.close()


def _setup(raw: Raw, port: int, *addresses: dict[str, str]) -> None:
    node = make_node("n1", kubelet_port=port, status={"addresses": list(addresses)} if addresses else None)
    assert raw.json("POST", "/api/v1/nodes", node)[0] == 201
    assert raw.json("POST", PODS, make_pod(spec={"nodeName": "n1"}))[0] == 201


def test_logs_are_proxied_to_the_rewritten_kubelet_path_and_streamed(raw: Raw, kubelet: FakeKubelet) -> None:
    _setup(raw, kubelet.port)
    status, headers, body = raw.request("GET", f"{PODS}/p1/log?tailLines=2&timestamps=true")
    assert (status, body) == (200, b"line1\nline2\n")
    request_line = kubelet.heads[0].split("\r\n")[0]
    assert request_line.startswith("GET /containerLogs/default/p1/main?")
    assert "tailLines=2" in request_line and "timestamps=true" in request_line


def test_an_exec_upgrade_is_pumped_byte_for_byte(raw: Raw, kubelet: FakeKubelet) -> None:
    _setup(raw, kubelet.port)
    context = ssl.create_default_context(cadata=raw.cluster.ca_pem.decode())
    with context.wrap_socket(socket.create_connection((raw.host, raw.port)), server_hostname="127.0.0.1") as sock:
        sock.settimeout(30)
        request = (
            f"POST {PODS}/p1/exec?command=echo&command=hi&stdout=true HTTP/1.1\r\nHost: x\r\n"
            "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
            "Content-Length: 0\r\n\r\n"
        ).encode()
        sock.sendall(request + b"\x80\x03pipelined")
        received = b""
        while b"pipelined" not in received:
            received += sock.recv(4096)
        assert received.startswith(b"HTTP/1.1 101")
        payload = bytes(range(256))
        sock.sendall(payload)
        echoed = b""
        while len(echoed) < len(payload):
            echoed += sock.recv(4096)
        assert echoed == payload
    request_line = kubelet.heads[0].split("\r\n")[0]
    assert request_line.startswith("POST /exec/default/p1/main?command=echo&command=hi")
    assert "output=1" in request_line


def test_proxy_refusals_are_statuses(cluster: DevCluster, raw: Raw) -> None:
    assert raw.json("POST", PODS, make_pod("unbound", spec={"schedulerName": "none"}))[0] == 201
    status, body = raw.json("GET", f"{PODS}/unbound/log")
    assert status == 400 and "does not have a host assigned" in body["message"]
    assert raw.json("POST", PODS, make_pod("orphan", spec={"nodeName": "gone"}))[0] == 201
    assert raw.json("GET", f"{PODS}/orphan/log")[0] == 404
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    raw.json("POST", "/api/v1/nodes", make_node("dead", kubelet_port=port))
    raw.json("POST", PODS, make_pod("stranded", spec={"nodeName": "dead"}))
    status, body = raw.json("GET", f"{PODS}/stranded/log")
    refused = f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    assert (status, body["kind"], body["reason"]) == (500, "Status", "")
    assert body["message"] == f'Get "https://127.0.0.1:{port}/containerLogs/default/stranded/main": {refused}'
    status, body = raw.json("POST", f"{PODS}/stranded/exec?command=true&stdout=true")
    assert (status, body["message"]) == (500, f"error dialing backend: {refused}")
    two = make_pod(
        "two", spec={"nodeName": "dead", "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}
    )
    raw.json("POST", PODS, two)
    status, body = raw.json("GET", f"{PODS}/two/log")
    assert status == 400 and "choose one of: [a b]" in body["message"]
    assert raw.request("GET", "/healthz")[0] == 200


UNRESOLVABLE = {"type": "Hostname", "address": "nebula-n1.invalid"}  # RFC 6761: never resolves
LOOPBACK = {"type": "InternalIP", "address": "127.0.0.1"}


def test_logs_dial_the_hostname_first_and_fail_like_kube_apiserver_when_it_resolves_nowhere(
    raw: Raw, kubelet: FakeKubelet
) -> None:
    """The default preferred order puts Hostname before InternalIP, and kube-apiserver dials
    one address only: a reachable InternalIP does not save a Hostname that resolves nowhere."""
    _setup(raw, kubelet.port, LOOPBACK, UNRESOLVABLE)
    status, body = raw.json("GET", f"{PODS}/p1/log")
    url = f"https://nebula-n1.invalid:{kubelet.port}/containerLogs/default/p1/main"
    assert (status, body["reason"]) == (500, "")
    assert body["message"] == f'Get "{url}": dial tcp: lookup nebula-n1.invalid: no such host'
    assert kubelet.heads == []


def test_logs_dial_the_internal_ip_when_it_is_the_best_type_the_node_has(raw: Raw, kubelet: FakeKubelet) -> None:
    _setup(raw, kubelet.port, {"type": "ExternalIP", "address": "192.0.2.1"}, LOOPBACK)
    status, _, body = raw.request("GET", f"{PODS}/p1/log")
    assert (status, body) == (200, b"line1\nline2\n")


def test_a_node_without_a_preferred_address_fails_logs_with_kube_apiservers_error(raw: Raw) -> None:
    node = make_node("bare")
    node["status"]["addresses"] = []
    raw.json("POST", "/api/v1/nodes", node)
    raw.json("POST", PODS, make_pod("lost", spec={"nodeName": "bare"}))
    status, body = raw.json("GET", f"{PODS}/lost/log")
    assert (status, body["message"]) == (500, "no preferred addresses found; known addresses: []")


def test_the_preferred_address_types_are_a_devcluster_option(kubelet: FakeKubelet, tmp_path: Path) -> None:
    """Like kube-apiserver's --kubelet-preferred-address-types=InternalIP."""
    with DevCluster(
        kubeconfig_path=str(tmp_path / "kubeconfig"), kubelet_preferred_address_types=("InternalIP",)
    ) as cluster:
        raw = Raw(cluster)
        _setup(raw, kubelet.port, UNRESOLVABLE, LOOPBACK)
        status, _, body = raw.request("GET", f"{PODS}/p1/log")
    assert (status, body) == (200, b"line1\nline2\n")


def test_kubectl_logs_fails_as_on_a_real_cluster_when_the_hostname_resolves_nowhere(
    cluster: DevCluster, raw: Raw, kubelet: FakeKubelet
) -> None:
    if not Path(KUBECTL_137).exists():
        pytest.skip(f"kubectl 1.37 is not installed at {KUBECTL_137}")
    _setup(raw, kubelet.port, LOOPBACK, UNRESOLVABLE)
    assert cluster.kubeconfig_path is not None
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig_path, HOME=str(Path(cluster.kubeconfig_path).parent))
    done = subprocess.run([KUBECTL_137, "logs", "p1"], env=env, capture_output=True, text=True, timeout=60)
    url = f"https://nebula-n1.invalid:{kubelet.port}/containerLogs/default/p1/main"
    assert done.returncode == 1
    assert done.stderr.strip() == f'Error from server: Get "{url}": dial tcp: lookup nebula-n1.invalid: no such host'
