"""A small blocking SPDY/3.1 client for tests: plays the API server towards a kubelet.

Opens a plain or TLS socket, sends the upgrade request, then drives `vnode.kubelet.spdy.
ClientSession` on one thread: every wait writes what is queued while reading what arrives,
so a large stdin never deadlocks against the stdout it produces. Server pings are answered.
Not a product module: tests and benches only.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from vnode.kubelet import spdy

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
CHUNK = 64 << 10
_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)


class UpgradeRefused(Exception):
    """The server answered the upgrade with something other than 101."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        super().__init__(f"upgrade refused with {status}: {body[:200]!r}")
        self.status, self.headers, self.body = status, headers, body


@dataclass
class ExecResult:
    """What an exec session produced, per stream type, and whether each stream was reset."""

    stdout: bytes
    stderr: bytes
    error: bytes
    resets: dict[str, int] = field(default_factory=dict)


class SpdyClient:
    """One upgraded connection. Build it with `SpdyClient.connect`; close it (or use `with`)."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        status: int,
        headers: list[tuple[str, str]],
        leftover: bytes,
        timeout: float,
    ) -> None:
        self.sock = sock
        self.status = status
        self.headers = headers
        self.protocol = self.header("x-stream-protocol-version")
        self.timeout = timeout
        self.session = spdy.ClientSession(max_frame_size=(1 << 24) - 1)
        self.events: list[spdy.ClientEvent] = []  # everything but DataReceived (kept per stream below)
        self.data: dict[int, bytearray] = {}
        self.fins: set[int] = set()
        self.resets: dict[int, int] = {}
        self.replied: set[int] = set()
        self.ping_answers: set[int] = set()
        self.goaway: spdy.GoAwayReceived | None = None
        self.eof = False
        self._outbox = bytearray()
        sock.setblocking(False)
        if leftover:
            self._feed(leftover)

    # -- connecting --------------------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        address: tuple[str, int],
        path: str,
        *,
        method: str = "POST",
        protocols: Sequence[str] = PROTOCOLS,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        timeout: float = 30.0,
    ) -> SpdyClient:
        """Connect, upgrade to SPDY/3.1 offering `protocols`; UpgradeRefused on any non-101."""
        raw = socket.create_connection(address, timeout=timeout)
        sock: socket.socket = raw
        try:
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(raw, server_hostname=server_hostname or address[0])
            lines = [f"{method} {path} HTTP/1.1", f"Host: {address[0]}:{address[1]}", "Content-Length: 0"]
            lines += ["Connection: Upgrade", "Upgrade: SPDY/3.1"]
            lines += [f"X-Stream-Protocol-Version: {protocol}" for protocol in protocols]
            lines += [f"{name}: {value}" for name, value in headers]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            status, response_headers, rest = _read_head(sock)
            if status != 101:
                raise UpgradeRefused(status, response_headers, _read_body(sock, response_headers, rest))
            return cls(sock, status=status, headers=response_headers, leftover=rest, timeout=timeout)
        except BaseException:
            sock.close()
            raise

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key.lower() == name), None)

    # -- streams -----------------------------------------------------------------------------

    def open(self, streamtype: str, *, headers: Sequence[tuple[str, str]] = (), wait: bool = True) -> int:
        """SYN_STREAM with `streamtype`; like client-go, wait for its SYN_REPLY unless told not to."""
        stream_id, wire = self.session.open([("streamtype", streamtype), *headers])
        self.data[stream_id] = bytearray()
        self._write(wire)
        if wait:
            self.wait_for(lambda: stream_id in self.replied or stream_id in self.resets, f"reply to {streamtype}")
        return stream_id

    def open_exec(
        self, *, stdin: bool = False, stdout: bool = True, stderr: bool = True, tty: bool = False
    ) -> dict[str, int]:
        """The streams client-go opens for exec/attach, in its order (exec-protocols.md §2.2)."""
        kinds = ["error"] + ["stdin"] * stdin + ["stdout"] * stdout + ["stderr"] * (stderr and not tty)
        kinds += ["resize"] * tty
        return {kind: self.open(kind) for kind in kinds}

    def send(self, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        """DATA in 32 KiB frames as kubectl writes stdin; returns once it is all on the socket."""
        for start in range(0, len(data), 32768):
            last = start + 32768 >= len(data)
            self._write(self.session.send_data(stream_id, data[start : start + 32768], fin=fin and last))
        if not data and fin:
            self._write(self.session.finish(stream_id))
        self.flush()

    def finish(self, stream_id: int) -> None:
        self._write(self.session.finish(stream_id))
        self.flush()

    def reset(self, stream_id: int, status: int = 5) -> None:
        self._write(self.session.reset(stream_id, status))
        self.flush()

    def ping(self, ping_id: int, *, wait: bool = True) -> None:
        """A client PING (odd id); by default wait until the server echoes it."""
        self._write(self.session.ping(ping_id))
        if wait:
            self.wait_for(lambda: ping_id in self.ping_answers, f"the echo of ping {ping_id}")
        else:
            self.flush()

    def send_goaway(self, status: int = 0) -> None:
        self._write(self.session.goaway(status))
        self.flush()

    def received(self, stream_id: int) -> bytes:
        return bytes(self.data.get(stream_id, b""))

    def closed(self, stream_id: int) -> bool:
        """The server ended the stream: FIN, RST_STREAM, GOAWAY, or the TCP connection."""
        return stream_id in self.fins or stream_id in self.resets or self.eof

    def wait_closed(self, stream_ids: Iterable[int], timeout: float | None = None) -> None:
        ids = list(stream_ids)
        self.wait_for(lambda: all(self.closed(i) for i in ids), f"streams {ids} to close", timeout=timeout)

    def communicate(self, streams: dict[str, int], stdin: bytes = b"", timeout: float | None = None) -> ExecResult:
        """Write stdin (then FIN it), wait as client-go does for stdout/stderr then error to close."""
        if "stdin" in streams:
            self.send(streams["stdin"], stdin, fin=True)
        outputs = [streams[kind] for kind in ("stdout", "stderr") if kind in streams]
        self.wait_closed(outputs, timeout)
        self.wait_closed([streams["error"]], timeout)
        resets = {kind: self.resets[i] for kind, i in streams.items() if i in self.resets}
        return ExecResult(
            stdout=self.received(streams["stdout"]) if "stdout" in streams else b"",
            stderr=self.received(streams["stderr"]) if "stderr" in streams else b"",
            error=self.received(streams["error"]),
            resets=resets,
        )

    # -- I/O ---------------------------------------------------------------------------------

    def wait_for(self, condition: Callable[[], bool], what: str = "condition", *, timeout: float | None = None) -> None:
        """Pump the socket (writing and reading) until `condition()`; TimeoutError, or EOFError
        if the server closed the connection first."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not condition():
            if self.eof and not self._outbox:
                if condition():
                    return
                raise EOFError(f"the server closed the connection before {what}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out waiting for {what}")
            self._step(min(remaining, 1.0))

    def wait_eof(self, timeout: float | None = None) -> None:
        """Until the server closes the TCP connection."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.eof:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("timed out waiting for the server to close the connection")
            self._step(min(remaining, 1.0))

    def flush(self) -> None:
        self.wait_for(lambda: not self._outbox, "the socket to take our bytes")

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            self.eof = True

    def __enter__(self) -> SpdyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, wire: bytes) -> None:
        self._outbox += wire

    def _step(self, timeout: float) -> None:
        """Wait up to `timeout` for the socket, then write what it takes and read what it has."""
        sock = self.sock
        readable = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
        if not readable:
            want_read = [] if self.eof else [sock]
            want_write = [sock] if self._outbox else []
            if not want_read and not want_write:
                return
            ready_read, ready_write = _wait(sock, read=bool(want_read), write=bool(want_write), timeout=timeout)
            readable = ready_read
            if ready_write:
                try:
                    sent = sock.send(self._outbox[:CHUNK])
                    del self._outbox[:sent]
                except _WOULD_BLOCK:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    self.eof, self._outbox = True, bytearray()
        if readable and not self.eof:
            try:
                chunk = sock.recv(CHUNK)
            except _WOULD_BLOCK:
                return
            except ConnectionResetError:
                chunk = b""
            if chunk:
                self._feed(chunk)
            else:
                self.eof = True

    def _feed(self, chunk: bytes) -> None:
        self._take(chunk)
        while self.session.stalled:  # RST_STREAMs of our own queued: they go out with the next write
            self._take(b"")

    def _take(self, chunk: bytes) -> None:
        for event in self.session.receive(chunk):
            if isinstance(event, spdy.DataReceived):
                self.data.setdefault(event.stream_id, bytearray()).extend(event.data)
                if event.fin:
                    self.fins.add(event.stream_id)
                continue
            self.events.append(event)
            if isinstance(event, spdy.StreamReplied):
                self.replied.add(event.stream_id)
            elif isinstance(event, spdy.StreamReset):
                self.resets[event.stream_id] = event.status
            elif isinstance(event, spdy.PingReceived):
                self._write(self.session.ping(event.ping_id))
            elif isinstance(event, spdy.PingAnswered):
                self.ping_answers.add(event.ping_id)
            elif isinstance(event, spdy.GoAwayReceived):
                self.goaway = event
        self._write(self.session.data_to_send())


def _read_head(sock: socket.socket) -> tuple[int, list[tuple[str, str]], bytes]:
    """Read an HTTP/1.1 response head; keep whatever came after it (the first SPDY frames)."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(4096)
        if not chunk:
            raise EOFError(f"connection closed inside the response head: {buffer[:200]!r}")
        buffer += chunk
        if len(buffer) > 65536:
            raise ValueError("response head longer than 64 KiB")
    head, _, rest = buffer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = [(name.strip(), value.strip()) for name, _, value in (line.partition(":") for line in header_lines)]
    return int(status_line.split(" ")[1]), headers, rest


def _read_body(sock: socket.socket, headers: list[tuple[str, str]], rest: bytes) -> bytes:
    """The body of a refusal: Content-Length, chunked, or up to the close."""
    fields = {name.lower(): value for name, value in headers}
    body = rest
    if "content-length" in fields:
        length = int(fields["content-length"])
        while len(body) < length and (chunk := sock.recv(4096)):
            body += chunk
        return body[:length]
    while chunk := sock.recv(4096):
        body += chunk
        if fields.get("transfer-encoding", "").lower() == "chunked" and body.endswith(b"0\r\n\r\n"):
            break
    if fields.get("transfer-encoding", "").lower() == "chunked":
        return _dechunk(body)
    return body


def _dechunk(body: bytes) -> bytes:
    out, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def _wait(sock: socket.socket, *, read: bool, write: bool, timeout: float) -> tuple[bool, bool]:
    """(readable, writable) within `timeout`: poll, not select, which refuses a descriptor
    numbered 1024 or more (a test holding a thousand connections gets such numbers)."""
    poller = select.poll()
    poller.register(sock, (select.POLLIN if read else 0) | (select.POLLOUT if write else 0))
    events = 0
    for _fd, mask in poller.poll(max(0.0, timeout) * 1000):
        events |= mask
    broken = bool(events & (select.POLLERR | select.POLLHUP))
    return bool(events & select.POLLIN) or (read and broken), bool(events & select.POLLOUT) or (write and broken)
