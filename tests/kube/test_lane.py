"""kube.lane: the plain calls' kept connections, against a scripted HTTP server on a real socket
(each connection answers its requests as the test says): a connection is kept and used again,
one the server closed while idle is replaced, a call that may have reached the server is never
sent twice but for a kept connection ended before any answer, idle connections are bounded,
and a proxy leaves every call to urllib3. TLS is the devcluster's: every other test's client
goes through the lane (tests/kube/test_client.py has the credentials)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s_client

from kube.client import Kube, UnreachableError
from kube.lane import Lane
from tests.support.polling import wait_for

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


class Scripted:
    """Answers each request by the next step of its connection's script: "ok" (answered, kept),
    "hangup" (read, then closed unanswered), "half" (a head and half a body, then closed),
    "idle-close" (answered, then closed at once as if idle too long), "silent" (never answers),
    "held" (answered once `release` is set)."""

    def __init__(self, scripts: list[list[str]]) -> None:
        self.scripts = scripts
        self.requests: list[str] = []  # request lines, as received
        self.connections = 0
        self.closed = 0  # connections the server has closed
        self.release = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            script = self.scripts[self.connections] if self.connections < len(self.scripts) else ["ok"] * 100
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, script), daemon=True).start()

    def _serve(self, conn: socket.socket, script: list[str]) -> None:
        try:
            self._steps(conn, script)
        finally:
            conn.close()
            self.closed += 1

    def _steps(self, conn: socket.socket, script: list[str]) -> None:
        reader = conn.makefile("rb")
        with reader:
            for step in script:
                line = reader.readline()
                if not line:
                    return
                length = 0
                while (header := reader.readline()) not in (b"\r\n", b""):
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":")[1])
                reader.read(length)
                self.requests.append(line.decode().strip())
                if step == "silent":
                    threading.Event().wait(5)
                    return
                if step == "hangup":
                    return
                if step == "held":
                    self.release.wait(30)
                if step == "half":
                    conn.sendall(OK[: len(OK) - 5])
                    return
                conn.sendall(OK)
                if step == "idle-close":
                    return

    def close(self) -> None:
        self._sock.close()


KUBES: list[Kube] = []


@pytest.fixture
def server_of() -> Iterator[object]:
    servers: list[Scripted] = []

    def make(*scripts: list[str]) -> Scripted:
        servers.append(Scripted(list(scripts)))
        return servers[-1]

    yield make
    while KUBES:
        KUBES.pop().close()
    for server in servers:
        server.close()


def kube_for(server: Scripted, *, pool: int = 4, timeout: float = 30.0) -> Kube:
    configuration = k8s_client.Configuration(host=f"http://127.0.0.1:{server.port}")
    configuration.connection_pool_maxsize = pool
    KUBES.append(Kube(k8s_client.ApiClient(configuration), timeout=timeout))
    return KUBES[-1]


def test_calls_share_one_kept_connection(server_of) -> None:  # type: ignore[no-untyped-def]
    server = server_of(["ok"] * 5)
    kube = kube_for(server)
    for _ in range(5):
        assert kube.get("/api/v1/namespaces") == {"ok": True}
    assert server.connections == 1 and len(server.requests) == 5


def test_a_connection_the_server_closed_while_idle_is_replaced_before_it_is_used(server_of) -> None:  # type: ignore[no-untyped-def]
    server = server_of(["idle-close"], ["ok"])
    kube = kube_for(server)
    assert kube.patch("/api/v1/namespaces/default/pods/a/status", {"status": {}}) == {"ok": True}
    wait_for(lambda: server.closed == 1, timeout=10)
    assert kube.patch("/api/v1/namespaces/default/pods/a/status", {"status": {}}) == {"ok": True}
    assert server.connections == 2
    assert server.requests == ["PATCH /api/v1/namespaces/default/pods/a/status HTTP/1.1"] * 2  # never sent twice


def test_a_get_on_a_kept_connection_ended_before_any_answer_is_sent_once_more_on_a_new_one(server_of) -> None:  # type: ignore[no-untyped-def]
    server = server_of(["ok", "hangup"], ["ok"])
    kube = kube_for(server)
    assert kube.get("/api/v1/namespaces") == {"ok": True}
    assert kube.get("/api/v1/namespaces/default/pods/a") == {"ok": True}
    assert server.connections == 2
    assert server.requests[1:] == ["GET /api/v1/namespaces/default/pods/a HTTP/1.1"] * 2


@pytest.mark.parametrize("write", ["POST", "PATCH", "DELETE"])
def test_a_write_the_server_read_is_never_sent_twice_even_on_a_kept_connection(server_of, write: str) -> None:  # type: ignore[no-untyped-def]
    """The server read the whole request and then closed: it may have acted on it (an API
    server restarting after its commit). A second send could create twice or report a create
    that worked as AlreadyExists; the caller's queue asks again if it must."""
    server = server_of(["ok", "hangup"], ["ok"])
    kube = kube_for(server)
    kube.get("/api/v1/namespaces")
    with pytest.raises(UnreachableError, match=write):
        kube.request(write, "/api/v1/namespaces/default/pods/a", body={"metadata": {"name": "a"}})
    assert [r.split()[0] for r in server.requests] == ["GET", write]
    assert server.connections == 1


def test_calls_go_under_the_path_of_the_server_address(server_of) -> None:  # type: ignore[no-untyped-def]
    """A kubeconfig `server:` with a path (an API behind a proxy's path, Rancher's
    /k8s/clusters/<id>): every call goes under it, as the watches do."""
    server = server_of(["ok"])
    configuration = k8s_client.Configuration(host=f"http://127.0.0.1:{server.port}/k8s/clusters/c-1/")
    KUBES.append(Kube(k8s_client.ApiClient(configuration)))
    assert KUBES[-1].get("/api/v1/namespaces?limit=1") == {"ok": True}
    assert server.requests == ["GET /k8s/clusters/c-1/api/v1/namespaces?limit=1 HTTP/1.1"]


def test_a_connection_in_use_when_the_client_is_closed_is_closed_when_its_call_ends(server_of) -> None:  # type: ignore[no-untyped-def]
    server = server_of(["held", "ok"])
    kube = kube_for(server)
    lane = Lane.of(kube._api)
    assert lane is not None
    answers: list[object] = []
    call = threading.Thread(target=lambda: answers.append(kube.get("/api/v1/namespaces")))
    call.start()
    wait_for(lambda: len(server.requests) == 1, timeout=10, what="the call in flight")
    kube.close()
    server.release.set()
    call.join(30)
    assert answers == [{"ok": True}]
    assert lane.idle() == 0  # not kept after the close
    wait_for(lambda: server.closed == 1, timeout=10, what="the server to see it closed")


def test_a_new_connection_ended_before_any_answer_is_unreachable_and_not_sent_again(server_of) -> None:  # type: ignore[no-untyped-def]
    server = server_of(["hangup"])
    kube = kube_for(server)
    with pytest.raises(UnreachableError, match="POST /api/v1/namespaces/default/pods"):
        kube.create("/api/v1/namespaces/default/pods", {"metadata": {"name": "a"}})
    assert len(server.requests) == 1


def test_an_answer_broken_mid_body_is_unreachable_and_not_sent_again(server_of) -> None:  # type: ignore[no-untyped-def]
    server = server_of(["ok", "half"])
    kube = kube_for(server)
    kube.get("/api/v1/namespaces")
    with pytest.raises(UnreachableError, match="DELETE"):
        kube.delete("/api/v1/namespaces/default/pods/a", grace_seconds=0)
    assert [r.split()[0] for r in server.requests] == ["GET", "DELETE"]


def test_a_server_that_never_answers_is_unreachable_after_the_timeout(server_of) -> None:  # type: ignore[no-untyped-def]
    server = server_of(["silent"])
    kube = kube_for(server, timeout=0.3)
    with pytest.raises(UnreachableError, match="TimeoutError|timeout"):
        kube.get("/api/v1/namespaces")


def test_idle_connections_are_bounded_by_the_pool_size(server_of) -> None:  # type: ignore[no-untyped-def]
    server = server_of()
    kube = kube_for(server, pool=3)
    lane = Lane.of(kube._api)
    assert lane is not None
    start = threading.Barrier(12)

    def call() -> None:
        start.wait()
        kube.get("/api/v1/namespaces")

    threads = [threading.Thread(target=call) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(server.requests) == 12
    assert lane.idle() <= 3
    kube.close()
    assert lane.idle() == 0
    assert kube.get("/api/v1/namespaces") == {"ok": True}  # a call after close opens a new one


def test_a_proxy_leaves_every_call_to_urllib3() -> None:
    configuration = k8s_client.Configuration(host="https://10.0.0.1:6443")
    configuration.proxy = "http://127.0.0.1:3128"
    assert Lane.of(k8s_client.ApiClient(configuration)) is None
    configuration = k8s_client.Configuration(host="https://10.0.0.1:6443")
    configuration.proxy = "http://127.0.0.1:3128"
    configuration.no_proxy = "10.0.0.0/8"  # bypassed: a plain pool manager again
    assert Lane.of(k8s_client.ApiClient(configuration)) is not None
