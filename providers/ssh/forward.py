"""`SshForward`: the seam's `PortConnection` over one SSH `direct-tcpip` channel.

Called by VM providers' `port_forward` (through `open_forward`): the channel reaches
127.0.0.1:port as the instance sees it, so a container on the host network is reached
without exposing the port. Each forward owns its SSH connection and closes it. Output is
pumped on the loop thread into a bounded buffer that the synchronous reader drains; or, once
`detach`ed, spliced to one end of a socket pair on the shared SSH loop (never a thread each).
Tests: tests/providers/ssh/test_ssh_forward.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading

import asyncssh

from providers.errors import Unavailable
from providers.eventloop import hung_up
from providers.ssh.loop import LoopThread, shared_loop
from providers.ssh.process import _PUMP_PAUSE, _Buffer
from providers.ssh.target import SshTarget, connect, describe

_CALL_TIMEOUT = 30.0
_CHUNK = 65536
_HUP_POLL = 1.0  # seconds between looks for the caller's close once it has half-closed
_spliced: set[asyncio.Future[None]] = set()  # the detached pumps (the loop holds tasks weakly)


class SshForward:
    """A connection opened by `open_forward`; safe from several threads."""

    def __init__(
        self,
        loop: LoopThread,
        conn: asyncssh.SSHClientConnection,
        reader: asyncssh.SSHReader[bytes],
        writer: asyncssh.SSHWriter[bytes],
    ) -> None:
        self._loop = loop
        self._conn = conn
        self._reader = reader
        self._writer = writer
        self._incoming = _Buffer()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pump: concurrent.futures.Future[None] | None = None  # started by the first read
        self._detached = False

    def is_closed(self) -> bool:
        """Whether this forward's SSH connection is closed (by `close`, by the far side, or
        once a detached socket's caller has closed it and the splice ended)."""
        return self._conn.is_closed()

    async def _read_all(self, reader: asyncssh.SSHReader[bytes]) -> None:
        try:
            while True:
                while self._incoming.full():
                    await asyncio.sleep(_PUMP_PAUSE)
                data = await reader.read(65536)
                if not data:
                    return
                self._incoming.put(data)
        except (asyncssh.Error, OSError):
            return
        finally:
            self._incoming.finish()

    def read(self, max_bytes: int = 65536) -> bytes:
        if self._closed.is_set():
            return b""
        with self._lock:
            if self._detached:
                raise RuntimeError("this forward is detached: read its socket")
            if self._pump is None:
                self._pump = self._loop.submit(self._read_all(self._reader))
        return self._incoming.read(max_bytes)

    def write(self, data: bytes) -> None:
        if self._detached:
            raise RuntimeError("this forward is detached: write to its socket")
        if self._closed.is_set():
            raise BrokenPipeError("the forwarded connection is closed")

        async def send() -> None:
            self._writer.write(data)
            await self._writer.drain()

        try:
            self._loop.run(send(), None)
        except (asyncssh.Error, OSError) as exc:
            raise BrokenPipeError(f"the forwarded connection broke: {describe(exc)}") from exc

    def close_write(self) -> None:
        async def eof() -> None:
            if self._writer.can_write_eof():
                self._writer.write_eof()

        if not self._closed.is_set() and not self._detached:
            try:
                self._loop.run(eof(), _CALL_TIMEOUT)
            except (asyncssh.Error, OSError, TimeoutError):
                pass

    def close(self) -> None:
        """Close the channel and the SSH connection. A no-op once detached: the socket's
        owner ends the connection by closing the socket."""
        if self._closed.is_set() or self._detached:
            return
        self._closed.set()
        self._incoming.finish()

        async def close() -> None:
            self._conn.close()
            await self._conn.wait_closed()

        try:
            self._loop.run(close(), _CALL_TIMEOUT)
        except (asyncssh.Error, OSError, TimeoutError):
            pass

    def detach(self) -> socket.socket:
        """The connection as one end of a socket pair; the other end is spliced to the channel
        on the shared SSH loop. The caller's shutdown(SHUT_WR) is the channel's EOF, the
        channel's EOF shuts our end for writing, the caller's close (or an SSH failure) closes
        the channel, the SSH connection and our end. Each direction reads on only once the
        other side has taken what it read (drain), so a stalled reader stalls the writer."""
        with self._lock:
            if self._detached or self._pump is not None or self._closed.is_set():
                raise RuntimeError("a forward is detached at most once, before any read, while open")
            self._detached = True
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        self._loop.submit(self._splice(ours))
        return theirs

    async def _splice(self, ours: socket.socket) -> None:
        task = asyncio.current_task()
        if task is not None:
            _spliced.add(task)
        try:
            try:
                sreader, swriter = await asyncio.open_connection(sock=ours, limit=_CHUNK)
            except OSError:
                ours.close()
                return
            up = asyncio.ensure_future(self._caller_to_channel(sreader, ours))
            down = asyncio.ensure_future(self._channel_to_caller(swriter))
            done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if done == {down} and down.exception() is None:
                await asyncio.wait({up})  # the channel ended cleanly: the caller may still write
            for task_ in (up, down):
                task_.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            swriter.close()
            with contextlib.suppress(OSError):
                await swriter.wait_closed()
        finally:
            self._closed.set()
            self._writer.close()  # sent after what is queued; sshd then delivers the rest and closes
            with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
                await asyncio.wait_for(self._writer.wait_closed(), _CALL_TIMEOUT)
            self._conn.close()
            with contextlib.suppress(asyncssh.Error, OSError):
                await self._conn.wait_closed()
            if task is not None:
                _spliced.discard(task)

    async def _caller_to_channel(self, sreader: asyncio.StreamReader, ours: socket.socket) -> None:
        """Returns once the caller has closed its socket (after its EOF reached the channel)."""
        while data := await sreader.read(_CHUNK):
            self._writer.write(data)
            await self._writer.drain()
        if self._writer.can_write_eof():
            self._writer.write_eof()
        while not hung_up(ours):
            await asyncio.sleep(_HUP_POLL)

    async def _channel_to_caller(self, swriter: asyncio.StreamWriter) -> None:
        while data := await self._reader.read(_CHUNK):
            swriter.write(data)
            await swriter.drain()
        swriter.write_eof()


def open_forward(target: SshTarget, port: int, *, loop: LoopThread | None = None) -> SshForward:
    """A new SSH connection and a `direct-tcpip` channel to 127.0.0.1:`port` on the far end.
    Unavailable if the host cannot be reached, or nothing listens there (the message says
    which: the server's refusal reason is passed on)."""
    runner = loop or shared_loop()

    async def start() -> SshForward:
        conn = await connect(target)
        try:
            reader, writer = await conn.open_connection("127.0.0.1", port, encoding=None)
        except (asyncssh.Error, OSError) as exc:
            conn.close()
            await conn.wait_closed()
            raise Unavailable(f"ssh to {target.address}: dial tcp4 127.0.0.1:{port}: {describe(exc)}") from exc
        return SshForward(runner, conn, reader, writer)

    try:
        return runner.run(start(), target.connect_timeout + 30)
    except TimeoutError as exc:
        raise Unavailable(f"ssh to {target.address}: no answer in time") from exc
