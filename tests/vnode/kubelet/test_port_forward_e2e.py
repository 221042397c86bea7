"""`kubectl port-forward` end to end through the devcluster with real clients: kubectl 1.20
(SPDY, pumped byte for byte), the image's kubectl and 1.37 (SPDY tunnelled in a websocket,
which the devcluster unwraps as kube-apiserver does), to a local Pod running
tests/support/servers/echo.py: 50 MB byte for byte, 20 connections at once, a closed client
closing the remote side, and the clear error of a provider that cannot forward."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube.client import path_for
from tests.support.clients.kubectl import KUBECTL_120, KUBECTL_137, KUBECTL_IMAGE, Rig
from tests.support.factories import make_pod
from tests.support.fixtures import kube_for
from tests.support.pods import phase_of
from tests.support.polling import wait_for
from tests.support.rigs.noforward import NoForwardProvider
from tests.support.rigs.runners import make_runner
from tests.support.servers import echo as echoserver
from vnode.kubelet.resolve import HandlerRegistry

CLIENTS = {"kubectl-1.20": KUBECTL_120, "kubectl-image": KUBECTL_IMAGE, "kubectl-1.37": KUBECTL_137}
FORWARDING = re.compile(rb"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


@pytest.fixture(scope="module")
def echo_port(rig: Rig) -> int:
    port = echoserver.free_port()
    command = (sys.executable, echoserver.__file__, str(port))
    kube = kube_for(rig.cluster)
    kube.create(path_for("pods", namespace="default"), make_pod("echo", "local", command=command))
    wait_for(lambda: phase_of(kube, "echo") == "Running", 60, what="the echo Pod to run")
    wait_for(lambda: b"listening" in pod_logs(rig, "echo"), 30, what="the echo server to listen")
    return port


@pytest.fixture(scope="module")
def unforwardable(rig: Rig, registry: HandlerRegistry) -> Iterator[str]:
    provider = NoForwardProvider("nofwd", {"cloud": f"pf-e2e-{uuid.uuid4().hex}"})
    runner = make_runner(rig.cluster, provider, kubelet_port=rig.server.kubelet_port, lease_renew_interval=0.5)
    runner.start()
    registry.add(runner.handler)
    kube = kube_for(rig.cluster)
    kube.create(path_for("pods", namespace="default"), make_pod("faraway", "nofwd"))
    wait_for(lambda: phase_of(kube, "faraway") == "Running", 60, what="the fake Pod to run")
    yield "faraway"
    registry.remove(runner.handler)
    runner.stop(timeout=10)
    for instance in provider.list():
        provider.terminate(instance.id)


def pod_logs(rig: Rig, pod: str) -> bytes:
    return rig.kubectl(KUBECTL_137, "logs", pod).stdout


class Forward:
    """A running `kubectl port-forward pod/<pod> :<port>` and the local port it listens on."""

    def __init__(self, rig: Rig, binary: str, pod: str, port: int) -> None:
        home = str(Path(rig.kubeconfig).parent)
        env = dict(os.environ, KUBECONFIG=rig.kubeconfig, HOME=home)
        args = [
            binary,
            "--kubeconfig",
            rig.kubeconfig,
            "port-forward",
            "--address",
            "127.0.0.1",
            f"pod/{pod}",
            f":{port}",
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = FORWARDING.search(line)
        assert found, (line, self.stop())
        self.local = int(found.group(1))

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.local), timeout=60)

    def stop(self) -> bytes:
        self.process.terminate()
        _, stderr = self.process.communicate(timeout=30)
        return stderr


@pytest.fixture(params=list(CLIENTS))
def kubectl(request: pytest.FixtureRequest) -> str:
    binary = CLIENTS[request.param]
    if not os.path.exists(binary):
        pytest.fail(f"{binary} is missing (make tools)")
    return binary


def echo_through(conn: socket.socket, payload: bytes) -> bytes:
    """Send `payload` then half-close, while reading the echo to its end; its sha256."""

    def send() -> None:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    digest = hashlib.sha256()
    while data := conn.recv(1 << 16):
        digest.update(data)
    sender.join(60)
    return digest.digest()


def test_fifty_megabytes_move_byte_for_byte(rig: Rig, kubectl: str, echo_port: int) -> None:
    payload = os.urandom(50 << 20)
    forward = Forward(rig, kubectl, "echo", echo_port)
    try:
        with forward.connect() as conn:
            assert echo_through(conn, payload) == hashlib.sha256(payload).digest()
    finally:
        forward.stop()
    wait_for(lambda: f"eof after {len(payload)}".encode() in pod_logs(rig, "echo"), 30, what="the server's EOF")


def test_twenty_concurrent_connections_are_served(rig: Rig, kubectl: str, echo_port: int) -> None:
    forward = Forward(rig, kubectl, "echo", echo_port)
    results: dict[int, bytes] = {}
    payloads = {n: os.urandom(256 << 10) for n in range(20)}

    def one(n: int) -> None:
        with forward.connect() as conn:
            results[n] = echo_through(conn, payloads[n])

    try:
        threads = [threading.Thread(target=one, args=(n,)) for n in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        forward.stop()
    assert results == {n: hashlib.sha256(p).digest() for n, p in payloads.items()}


def test_a_closed_client_closes_the_remote_side(rig: Rig, kubectl: str, echo_port: int) -> None:
    marker = os.urandom(4096 + int.from_bytes(os.urandom(2), "big"))
    forward = Forward(rig, kubectl, "echo", echo_port)
    try:
        conn = forward.connect()
        conn.sendall(marker)
        received = b""
        while len(received) < len(marker):
            received += conn.recv(1 << 16)
        assert received == marker
        conn.close()  # no half-close first: the whole connection goes
        wait_for(lambda: f"eof after {len(marker)}".encode() in pod_logs(rig, "echo"), 30, what="the server's EOF")
    finally:
        forward.stop()


def test_a_provider_without_port_forward_says_so(rig: Rig, kubectl: str, unforwardable: str) -> None:
    forward = Forward(rig, kubectl, unforwardable, 8080)
    try:
        with forward.connect() as conn:
            conn.sendall(b"hello")
            conn.settimeout(60)
            try:
                while conn.recv(1 << 16):
                    pass
            except OSError:
                pass
    finally:
        stderr = forward.stop()
    assert b"port-forward is not supported by provider nofwd" in stderr, stderr
