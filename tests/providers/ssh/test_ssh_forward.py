"""Port-forward over SSH against a real OpenSSH sshd: a `direct-tcpip` channel reaches a
server on the far end's loopback, half-closes reach it, and a closed port is Unavailable; a
detached forward does the same over a socket pair pumped on the shared SSH loop, with
back-pressure, and costs no thread per connection."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from providers.errors import Unavailable
from providers.eventloop import LoopThread
from providers.ssh import open_forward
from providers.ssh.loop import shared_loop
from providers.streams import DetachablePortConnection
from tests.support.polling import wait_for
from tests.support.servers import echo as echoserver
from tests.support.servers.sshd import Sshd
from tests.support.stalling import BOUND, pattern, read_to_eof, send_until_stalled


@pytest.fixture
def echo_port() -> Iterator[int]:
    """An echo server on 127.0.0.1 (the sshd's loopback), one connection at a time."""
    server = socket.create_server(("127.0.0.1", 0))
    port = int(server.getsockname()[1])

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echoserver.serve, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield port
    server.close()


def test_a_direct_tcpip_channel_echoes_and_half_closes(sshd: Sshd, echo_port: int) -> None:
    forward = open_forward(sshd.target(), echo_port)
    try:
        payload = bytes(range(256)) * 4096
        forward.write(payload)
        forward.close_write()
        received = b""
        while data := forward.read():
            received += data
        assert received == payload
    finally:
        forward.close()
    assert forward.read() == b""


def test_a_port_nothing_listens_on_is_unavailable(sshd: Sshd) -> None:
    port = echoserver.free_port()
    with pytest.raises(Unavailable, match=f"dial tcp4 127.0.0.1:{port}"):
        open_forward(sshd.target(), port)


# The detached forward (`DetachablePortConnection`): one end of a socket pair spliced to the
# channel on the shared SSH loop. The far-end servers run on one event loop of their own, so
# counting threads counts only what the forwards cost.


class FarEnd:
    """TCP servers on 127.0.0.1 (the sshd's loopback), all on one event-loop thread."""

    def __init__(self) -> None:
        self.loop = LoopThread("test-far-end")
        self.open = 0  # echo connections not yet closed (changed on the loop only)
        self.greeted: list[bytes] = []  # what each greet connection received before its EOF
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self, mode: str) -> int:
        handlers = {"echo": self._echo, "hold": self._hold, "greet": self._greet}
        handler = handlers[mode]

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._writers.add(writer)
            try:
                await handler(reader, writer)
            except OSError:
                pass
            finally:
                writer.close()
                self._writers.discard(writer)

        async def listen() -> int:
            server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=512)
            self._servers.append(server)
            return int(server.sockets[0].getsockname()[1])

        return self.loop.run(listen(), 10)

    def stop(self) -> None:
        async def close() -> None:
            for server in self._servers:
                server.close()
            await asyncio.sleep(0.1)  # a connection accepted just now gets its handler started
            deadline = asyncio.get_running_loop().time() + 30
            while self._writers and asyncio.get_running_loop().time() < deadline:
                for writer in list(self._writers):
                    writer.close()  # each handler then ends and forgets its writer
                await asyncio.sleep(0.05)
            for server in self._servers:
                await server.wait_closed()

        self.loop.run(close(), 30)
        self.loop.stop()

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            self.open -= 1

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Reads to EOF, then keeps its side open and silent until the other side is gone."""
        while await reader.read(65536):
            pass
        while not writer.is_closing():
            await asyncio.sleep(0.2)

    async def _greet(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Says hello and half-closes at once, then takes what the client sends until its EOF."""
        writer.write(b"hello")
        writer.write_eof()
        self.greeted.append(await reader.read(-1))


@pytest.fixture
def far_end() -> Iterator[FarEnd]:
    servers = FarEnd()
    yield servers
    servers.stop()


def read_line(sock: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n") and (data := sock.recv(64)):
        line += data
    return line


def test_a_detached_forward_echoes_half_closes_and_closes_the_far_side(sshd: Sshd, far_end: FarEnd) -> None:
    forward = open_forward(sshd.target(), far_end.start("echo"))
    assert isinstance(forward, DetachablePortConnection)
    sock = forward.detach()
    with sock:
        payload = bytes(range(256)) * 4096  # 1 MiB: more than the socket buffers
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(read_to_eof(sock)), daemon=True)
        reader.start()
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)  # the channel's EOF: the echo sends the rest, then ends
        reader.join(60)
        assert received == [payload]
    wait_for(forward.is_closed, timeout=60, what="the SSH connection closed")
    wait_for(lambda: far_end.open == 0, timeout=60, what="the far end's connection closed")
    assert forward.read() == b""
    forward.close()  # a no-op once detached


def test_the_channel_eof_shuts_the_socket_for_writing_only(sshd: Sshd, far_end: FarEnd) -> None:
    forward = open_forward(sshd.target(), far_end.start("greet"))
    with forward.detach() as sock:
        assert read_to_eof(sock) == b"hello"  # the far side's EOF is ours
        sock.sendall(b"still heard")  # and we can still write
        sock.shutdown(socket.SHUT_WR)
        wait_for(lambda: far_end.greeted == [b"still heard"], timeout=60, what="the far side got our bytes")
    wait_for(forward.is_closed, timeout=60, what="the SSH connection closed")


def test_closing_the_socket_closes_the_ssh_connection(sshd: Sshd, far_end: FarEnd) -> None:
    """The far side stays open and silent after our EOF: only our close can end it."""
    forward = open_forward(sshd.target(), far_end.start("hold"))
    sock = forward.detach()
    sock.sendall(b"anything")
    sock.shutdown(socket.SHUT_WR)
    assert not forward.is_closed()
    sock.close()
    wait_for(forward.is_closed, timeout=60, what="the SSH connection closed after the caller's close")


def test_an_ssh_failure_closes_the_socket(sshd: Sshd, far_end: FarEnd) -> None:
    forward = open_forward(sshd.target(), far_end.start("hold"))
    with forward.detach() as sock:
        sock.settimeout(60)

        async def drop() -> None:
            forward._conn.abort()  # the transport breaks under the channel

        shared_loop().run(drop(), 10)
        try:
            assert sock.recv(65536) == b""
        except ConnectionResetError:
            pass  # a reset is as good as EOF here
    wait_for(forward.is_closed, timeout=60, what="the SSH connection closed")


def test_a_stalled_reader_stalls_the_writer(sshd: Sshd, far_end: FarEnd) -> None:
    """Invariant: the pump reads on only once the other side took what it read; a caller that
    never reads is refused more bytes once the buffers on the path are full."""
    forward = open_forward(sshd.target(), far_end.start("echo"))
    with forward.detach() as sock:
        sent = send_until_stalled(sock)
        assert 0 < sent < BOUND
        sock.setblocking(True)
        sock.shutdown(socket.SHUT_WR)
        echoed = read_to_eof(sock)
    assert echoed == pattern(sent)


def test_detach_is_refused_after_a_read_or_twice(sshd: Sshd, far_end: FarEnd) -> None:
    forward = open_forward(sshd.target(), far_end.start("greet"))
    try:
        assert forward.read() == b"hello"
        with pytest.raises(RuntimeError, match="before any read"):
            forward.detach()
        assert forward.read() == b""  # the blocking interface is unchanged
    finally:
        forward.close()
    other = open_forward(sshd.target(), far_end.start("greet"))
    with other.detach() as sock:
        with pytest.raises(RuntimeError, match="at most once"):
            other.detach()
        with pytest.raises(RuntimeError, match="detached"):
            other.read()
        assert read_to_eof(sock) == b"hello"


def test_I7_detached_forwards_no_thread_per_connection(sshd: Sshd, far_end: FarEnd) -> None:
    """Invariant: 200 detached forwards, all open and echoing at once, add no thread each."""
    port = far_end.start("echo")
    first = open_forward(sshd.target(), port)
    socks = [first.detach()]  # the shared SSH loop is running from here on
    baseline = threading.active_count()
    forwards = [first] + [open_forward(sshd.target(), port) for _ in range(199)]
    socks += [forward.detach() for forward in forwards[1:]]
    try:
        for number, sock in enumerate(socks):
            sock.sendall(b"%d\n" % number)
        for number, sock in enumerate(socks):
            sock.settimeout(60)
            assert read_line(sock) == b"%d\n" % number
        assert threading.active_count() <= baseline + 2
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: all(forward.is_closed() for forward in forwards), timeout=120, what="every forward closed")
