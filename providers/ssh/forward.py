"""`SshForward`: the seam's `PortConnection` over one SSH `direct-tcpip` channel.

Called by VM providers' `port_forward` (through `open_forward`): the channel reaches
127.0.0.1:port as the instance sees it, so a container on the host network is reached
without exposing the port. Each forward owns its SSH connection and closes it. Output is
pumped on the loop thread into a bounded buffer that the synchronous reader drains.
Tests: tests/providers/ssh/test_ssh_forward.py.
"""

from __future__ import annotations

import asyncio
import threading

import asyncssh

from providers.errors import Unavailable
from providers.ssh.loop import LoopThread, shared_loop
from providers.ssh.process import _PUMP_PAUSE, _Buffer
from providers.ssh.target import SshTarget, connect, describe

_CALL_TIMEOUT = 30.0


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
        self._writer = writer
        self._incoming = _Buffer()
        self._closed = threading.Event()
        self._pump = loop.submit(self._read_all(reader))

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
        return self._incoming.read(max_bytes)

    def write(self, data: bytes) -> None:
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

        if not self._closed.is_set():
            try:
                self._loop.run(eof(), _CALL_TIMEOUT)
            except (asyncssh.Error, OSError, TimeoutError):
                pass

    def close(self) -> None:
        if self._closed.is_set():
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
