"""Followed logs without a thread each (I7, vnode/kubelet/follow.py): 1,000 `logs -f` over
real TLS on a fixed pool, the followers cap (429), a slow client parks its follower, idle
streams back off, and a stream without `read_nowait` keeps a thread of its own."""

from __future__ import annotations

import asyncio
import json
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from providers.base import LogStream
from tests.support.polling import wait_for
from tests.support.rigs.offline import adopt_new_pod, serving_fake
from tests.support.rigs.vnode import loopback_listeners
from tests.support.servers.tls import https_get
from vnode.handler import Handler
from vnode.kubelet import follow
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import Listeners

CLIENTS = 1000
CONTEXT = ssl._create_unverified_context()
BIG_LINE = "x" * 1000 + " {n}"  # about 1 KB a line
BIG_LINES = 20000  # about 20 MB in all


@pytest.fixture(scope="module")
def server(registry: HandlerRegistry) -> Iterator[Listeners]:
    """The kubelet listener with room for 1,000 anonymous connections from one address."""
    with loopback_listeners(registry, Limits(per_client=4096, total=4096)) as running:
        yield running


@pytest.fixture(scope="module")
def capped(registry: HandlerRegistry) -> Iterator[Listeners]:
    with loopback_listeners(registry, Limits(followers_total=3)) as running:
        yield running


def handler_with(registry: HandlerRegistry, log: dict[str, Any]) -> Iterator[Handler]:
    yield from serving_fake(registry, "followers", {"log": log})


@pytest.fixture(scope="module")
def slow_lines(registry: HandlerRegistry) -> Iterator[Handler]:
    """A line a second: 1,000 followers idle most of the time, as real ones do."""
    yield from handler_with(registry, {"interval": 1.0})


@pytest.fixture(scope="module")
def big_lines(registry: HandlerRegistry) -> Iterator[Handler]:
    """About 20 MB of output within two seconds of the start."""
    yield from handler_with(registry, {"interval": 0.0001, "lines": [BIG_LINE] * BIG_LINES})


def running_pod(server: Listeners, handler: Handler, name: str) -> str:
    """A Pod whose log answers (its container started); its containerLogs path."""
    adopt_new_pod(handler, name)
    path = f"/containerLogs/default/{name}/main"
    wait_for(lambda: https_get(server.kubelet_port, f"{path}?tailLines=1")[0] == 200, 60, what=f"{name} started")
    return path


class Clients:
    """Raw TLS clients read with one selector (no thread per client in the test either)."""

    def __init__(self, port: int, paths: list[str], *, receive_buffer: int | None = None) -> None:
        self.selector = selectors.DefaultSelector()
        self.received: dict[ssl.SSLSocket, bytearray] = {}
        for path in paths:
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if receive_buffer is not None:
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            raw.settimeout(60)
            raw.connect(("127.0.0.1", port))
            tls = CONTEXT.wrap_socket(raw)
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            tls.setblocking(False)
            self.selector.register(tls, selectors.EVENT_READ)
            self.received[tls] = bytearray()

    def pump(self, timeout: float = 0.2) -> None:
        """Read whatever has come, for at most about `timeout` seconds."""
        for key, _ in self.selector.select(timeout):
            sock: ssl.SSLSocket = key.fileobj  # type: ignore[assignment]
            try:
                while data := sock.recv(65536):
                    self.received[sock] += data
                if not data:
                    self.selector.unregister(sock)
            except (ssl.SSLWantReadError, BlockingIOError):
                continue

    def every(self, condition: Callable[[bytes], bool]) -> bool:
        self.pump()
        return all(condition(bytes(data)) for data in self.received.values())

    def close(self, count: int | None = None) -> None:
        for sock in list(self.received)[:count]:
            self.selector.unregister(sock)
            sock.close()
            del self.received[sock]


def status(data: bytes) -> int:
    return int(data[9:12]) if data.startswith(b"HTTP/1.1 ") and len(data) >= 12 else 0


def dechunked(data: bytes) -> bytes:
    """The body of a chunked answer, its whole chunks so far."""
    out, position = bytearray(), data.find(b"\r\n\r\n") + 4
    while (end := data.find(b"\r\n", position)) > 0:
        size = int(data[position:end], 16)
        if size == 0 or end + 2 + size + 2 > len(data):
            break
        out += data[end + 2 : end + 2 + size]
        position = end + 2 + size + 2
    return bytes(out)


def new_output(data: bytes) -> bool:
    """A 200 whose body (tailLines=0: only lines written while following) has a line."""
    head, _, body = data.partition(b"\r\n\r\n")
    return status(head) == 200 and b"fake instance" in body


def test_I7_a_thousand_followed_logs_hold_no_thread_each(
    server: Listeners, slow_lines: Handler, registry: HandlerRegistry
) -> None:
    paths = [running_pod(server, slow_lines, f"followed-{n}") for n in range(10)]
    pool, gauge = follow.pool(), server.streams.followers
    wait_for(lambda: gauge.open == 0 and pool.following() == 0, what="no followers left from before")
    baseline = threading.active_count()
    clients = Clients(server.kubelet_port, [f"{paths[n % 10]}?follow=true&tailLines=0" for n in range(CLIENTS)])
    try:
        wait_for(lambda: clients.every(new_output), 180, 0.0, what="new output at every follower")
        assert gauge.open == CLIENTS and pool.following() == CLIENTS
        # The pool's threads and the default executor's few, never one per follower.
        assert threading.active_count() <= baseline + follow.POOL_THREADS + 10
        assert pool.threads() == follow.POOL_THREADS
        marks = {sock: len(data) for sock, data in clients.received.items()}

        def grown() -> bool:
            clients.pump()
            return all(len(data) > marks[sock] for sock, data in clients.received.items())

        wait_for(grown, 120, 0.0, what="more output at every follower")
    finally:
        clients.close()
    wait_for(lambda: gauge.open == 0, 60, what="every follower's place given back")
    wait_for(lambda: pool.following() == 0, 60, what="every follower released by the pool")


def test_I7_a_log_stream_past_followers_total_is_a_429_and_the_others_stream_on(
    capped: Listeners, slow_lines: Handler
) -> None:
    path = running_pod(capped, slow_lines, "capped") + "?follow=true&tailLines=0"
    gauge = capped.streams.followers
    clients = Clients(capped.kubelet_port, [path] * 3)
    try:
        wait_for(lambda: clients.every(lambda data: status(data) == 200), 60, 0.0, what="three followers")
        code, headers, body = https_get(capped.kubelet_port, path)
        assert code == 429 and headers["retry-after"] == "5"
        status_body = json.loads(body)
        assert status_body["message"] == gauge.refusal() and status_body["reason"] == "TooManyRequests"
        assert "LISTENER_LIMITS['followers_total']" in gauge.refusal()
        assert gauge.open == 3 and gauge.refused >= 1
        wait_for(lambda: clients.every(new_output), 60, 0.0, what="the three keep streaming")
        clients.close(1)
        wait_for(lambda: gauge.open == 2, 60, what="a closed follower's place given back")
        code, _, _ = https_get(capped.kubelet_port, path.replace("follow=true", "follow=false"))
        assert code == 200
        # An error from the provider's side, after the place was taken, gives it back too.
        assert https_get(capped.kubelet_port, path.replace("follow=true", "previous=true"))[0] == 400
        assert gauge.open == 2
    finally:
        clients.close()
    wait_for(lambda: gauge.open == 0, 60, what="every place given back")


def test_I7_a_slow_client_parks_its_follower_and_output_piles_up_at_the_source_not_here(
    server: Listeners, big_lines: Handler
) -> None:
    pool = follow.pool()
    wait_for(lambda: pool.following() == 0, 60, what="no followers left from before")
    path = running_pod(server, big_lines, "flood")
    clients = Clients(server.kubelet_port, [f"{path}?follow=true"], receive_buffer=4096)
    stalled = Clients(server.kubelet_port, [f"{path}?follow=true"], receive_buffer=4096)
    try:
        followers = wait_for(lambda: len(pool.snapshot()) == 2 and pool.snapshot(), 60, what="two followers")
        parked = lambda: all(f.state == follow.PARKED for f in followers)  # noqa: E731
        wait_for(parked, 120, what="both followers parked (their queues full)")
        # All the output exists now; each follower has read about what the socket buffers
        # hold (they may still take a chunk more), not what the source produced.
        last = f" {BIG_LINES}\n".encode()
        wait_for(lambda: https_get(server.kubelet_port, f"{path}?tailLines=1")[2].endswith(last), 60)
        total = len(https_get(server.kubelet_port, path)[2])
        for follower in followers:
            assert follower.read_bytes < total / 2
            assert follower.queued_bytes <= follow.QUEUED_CHUNKS * follow.READ_SIZE
        # A parked follower whose client goes is released, its place given back.
        stalled.close()
        wait_for(lambda: pool.following() == 1 and server.streams.followers.open == 1, 60, what="one released")
        # Once the client reads, everything arrives, in order.
        wait_for(lambda: clients.every(lambda data: dechunked(data).endswith(last)), 120, 0.0, what="all of it")
        body = dechunked(bytes(next(iter(clients.received.values()))))
        assert body.count(b"x" * 1000) == BIG_LINES
    finally:
        clients.close()
        stalled.close()
    wait_for(lambda: pool.following() == 0, 60, what="the follower released")


class PlainStream:
    """A LogStream without `read_nowait` (as the ssh, modal and runpod providers give)."""

    def __init__(self, inner: LogStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int = 65536) -> bytes:
        return self._inner.read(max_bytes)

    def close(self) -> None:
        self._inner.close()


def test_a_log_stream_without_read_nowait_is_read_by_a_thread_of_its_own(
    server: Listeners, slow_lines: Handler, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = running_pod(server, slow_lines, "plain")
    provider: Any = slow_lines.provider
    logs = provider.logs
    monkeypatch.setattr(provider, "logs", lambda iid, options: PlainStream(logs(iid, options)))
    gauge, pool = server.streams.followers, follow.pool()
    wait_for(lambda: gauge.open == 0, 60, what="no followers left from before")
    clients = Clients(server.kubelet_port, [f"{path}?follow=true&tailLines=0"])
    try:
        wait_for(lambda: clients.every(new_output), 60, 0.0, what="new output through the thread")
        names = {thread.name for thread in threading.enumerate()}
        assert "logs-default-plain" in names and gauge.open == 1 and pool.following() == 0
    finally:
        clients.close()
    wait_for(lambda: "logs-default-plain" not in {t.name for t in threading.enumerate()}, 60, what="thread ended")
    wait_for(lambda: gauge.open == 0, 60, what="its place given back")


# -- the pool on its own ---------------------------------------------------------------------------
class Endless:
    """A PolledLogStream with output always there, or never (`idle`); it counts every ask."""

    def __init__(self, *, idle: bool = False) -> None:
        self.idle = idle
        self.asked: list[float] = []
        self.closed_by: str | None = None

    def read(self, max_bytes: int = 65536) -> bytes:
        raise AssertionError("the pool never blocks in read")

    def read_nowait(self, max_bytes: int = 65536) -> bytes | None:
        self.asked.append(time.monotonic())
        return None if self.idle else b"x" * max_bytes

    def close(self) -> None:
        self.closed_by = threading.current_thread().name


async def until(condition: Callable[[], bool], what: str) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), 60)
    except TimeoutError:
        raise AssertionError(f"{what} not met within 60s") from None


def test_I7_a_follower_whose_client_does_not_take_is_not_polled_until_it_does() -> None:
    pool = follow.FollowerPool(threads=1)
    busy, idle = Endless(), Endless(idle=True)

    async def main() -> None:
        follower, other = pool.follow(busy), pool.follow(idle)
        chunks = follower.chunks()
        assert len(await anext(chunks)) == follow.READ_SIZE
        await until(lambda: follower.state == follow.PARKED, "parked")
        asked = len(busy.asked)
        assert follower.queued_bytes == follow.QUEUED_CHUNKS * follow.READ_SIZE
        await until(lambda: len(idle.asked) >= 4, "the pool polling the idle stream meanwhile")
        assert len(busy.asked) == asked and follower.state == follow.PARKED
        await anext(chunks)  # the client takes one: polled again
        await until(lambda: len(busy.asked) > asked, "polled again")
        await chunks.aclose()
        other.close()
        await until(lambda: pool.following() == 0, "both released")

    asyncio.run(main())
    assert busy.closed_by == idle.closed_by == "log-followers-0"  # closed by the pool, not the loop


def test_an_idle_stream_is_asked_less_and_less_often_up_to_once_a_second() -> None:
    pool = follow.FollowerPool(threads=1)
    idle = Endless(idle=True)

    async def main() -> None:
        follower = pool.follow(idle)
        await until(lambda: len(idle.asked) >= 7, "seven asks")
        assert follower.delay == follow.LAST_DELAY
        follower.close()
        await until(lambda: pool.following() == 0, "released")

    asyncio.run(main())
    gaps = [later - earlier for earlier, later in zip(idle.asked, idle.asked[1:], strict=False)]
    for number, gap in enumerate(gaps[:5]):  # waits only lengthen under load, never shorten
        assert gap >= min(follow.FIRST_DELAY * 2 ** (number + 1), follow.LAST_DELAY) * 0.9


def test_a_stream_that_fails_ends_its_answer_and_is_closed() -> None:
    class Failing(Endless):
        def read_nowait(self, max_bytes: int = 65536) -> bytes | None:
            raise OSError("disk gone")

    pool, failing = follow.FollowerPool(threads=1), Failing()

    async def main() -> list[bytes]:
        return [chunk async for chunk in pool.follow(failing).chunks()]

    assert asyncio.run(main()) == []
    wait_for(lambda: failing.closed_by == "log-followers-0" and pool.following() == 0, what="closed")


def test_the_fake_and_local_streams_are_polled_log_streams() -> None:
    from providers.base import PolledLogStream
    from providers.fake.logs import ScriptedLogStream
    from providers.local.logs import FileLogStream

    assert issubclass(ScriptedLogStream, PolledLogStream) and issubclass(FileLogStream, PolledLogStream)
    assert not isinstance(PlainStream(Endless()), PolledLogStream)
