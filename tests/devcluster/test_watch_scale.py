"""Fan-out at scale over real HTTPS: 200 concurrent watchers and 1,000 Pod writes, every
watcher seeing exactly the store's history for Pods, in order."""

from __future__ import annotations

import json
import selectors
import socket
import ssl
import threading
import time

from devcluster import DevCluster
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_pod

PODS = "/api/v1/namespaces/default/pods"
Event = tuple[str, str, str]


class ManyWatches:
    """Many raw HTTPS watch streams read by ONE thread with a selector.

    One reader thread instead of 200 keeps the test's own cost small, so the timing measures
    the server. Each stream's chunked body is kept whole and decoded at the end.
    """

    def __init__(self, raw: Raw, path: str, count: int) -> None:
        self.selector = selectors.DefaultSelector()
        self.bodies: dict[ssl.SSLSocket, bytearray] = {}
        for _ in range(count):
            sock = raw.context.wrap_socket(socket.create_connection((raw.host, raw.port)), server_hostname=raw.host)
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {raw.host}\r\nAccept: application/json\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            status_line, _, rest = head.partition(b"\r\n\r\n")
            assert status_line.startswith(b"HTTP/1.1 200") and b"chunked" in status_line.lower()
            sock.setblocking(False)
            self.bodies[sock] = bytearray(rest)
            self.selector.register(sock, selectors.EVENT_READ)

    def read_until(self, events_each: int, *, timeout: float) -> None:
        """Read until every stream holds `events_each` event lines (or fail at `timeout`)."""
        deadline = time.monotonic() + timeout
        pending = {s for s, body in self.bodies.items() if body.count(b'{"type"') < events_each}
        while pending:
            assert time.monotonic() < deadline, f"{len(pending)} watchers still short of {events_each} events"
            for key, _ in self.selector.select(timeout=1):
                sock = key.fileobj
                assert isinstance(sock, ssl.SSLSocket)
                while True:
                    try:
                        data = sock.recv(65536)
                    except (ssl.SSLWantReadError, BlockingIOError):
                        break
                    assert data, "a watch ended early"
                    self.bodies[sock] += data
                if self.bodies[sock].count(b'{"type"') >= events_each:
                    pending.discard(sock)

    def events(self) -> list[list[Event]]:
        return [_decode(bytes(body)) for body in self.bodies.values()]

    def close(self) -> None:
        for sock in self.bodies:
            self.selector.unregister(sock)
            sock.close()
        self.selector.close()


def _decode(body: bytes) -> list[Event]:
    """Undo chunked framing, then read the NDJSON events."""
    data, rest = bytearray(), body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        data += rest[:size]
        rest = rest[size + 2 :]
    events = []
    for line in bytes(data).splitlines():
        event = json.loads(line)
        meta = event["object"]["metadata"]
        events.append((event["type"], meta["name"], meta["resourceVersion"]))
    return events


def test_200_watchers_see_1000_writes_without_loss_or_reordering(cluster: DevCluster, raw: Raw) -> None:
    start = int(raw.json("GET", PODS)[1]["metadata"]["resourceVersion"])
    watches = ManyWatches(raw, f"{PODS}?watch=true&resourceVersion={start}", 200)
    writers, pods_per_writer = 4, 50  # each pod: create, 3 updates, delete = 5 writes; 1,000 in all
    expected = writers * pods_per_writer * 5
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        conn = raw.connection()
        merge = {"Content-Type": "application/merge-patch+json"}
        try:
            for i in range(pods_per_writer):
                name = f"w{writer}-{i}"
                for method, path, body, headers in (
                    (
                        "POST",
                        PODS,
                        make_pod(name, spec={"schedulerName": "none"}),
                        {"Content-Type": "application/json"},
                    ),
                    ("PATCH", f"{PODS}/{name}", {"metadata": {"labels": {"n": "1"}}}, merge),
                    ("PATCH", f"{PODS}/{name}", {"metadata": {"labels": {"n": "2"}}}, merge),
                    ("PATCH", f"{PODS}/{name}", {"metadata": {"labels": {"n": "3"}}}, merge),
                    ("DELETE", f"{PODS}/{name}", None, {}),
                ):
                    conn.request(method, path, body=json.dumps(body).encode() if body else None, headers=headers)
                    response = conn.getresponse()
                    response.read()
                    assert response.status in (200, 201), (method, path, response.status)
        except BaseException as err:  # reported by the main thread
            errors.append(err)
        finally:
            conn.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    began = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        watches.read_until(expected, timeout=120)
        elapsed = time.monotonic() - began
        for thread in threads:
            thread.join()
        results = watches.events()
    finally:
        watches.close()
    assert not errors, errors[:3]
    history = [
        (c.type, c.name, str(c.rv)) for c in cluster.store.history() if c.storage_key == "/pods" and c.rv > start
    ]
    assert len(history) == expected
    assert all(sequence == history for sequence in results)
    assert elapsed < 60, f"took {elapsed:.1f}s"
