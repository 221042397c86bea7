"""`SshProcess`: the seam's `Process` over one SSH session channel (exec, with a PTY or pipes).

Called by VM providers' `exec` (through `start_process`) and by `providers.ssh.logs`.
Output is pumped on the loop thread into bounded buffers that synchronous callers
drain; each process owns its connection and closes it. With a PTY, stdin EOF is the
terminal's EOF character (an SSH EOF cannot half-close a PTY), as in a terminal.
Tests: tests/providers/ssh/test_ssh.py.
"""

from __future__ import annotations

import asyncio
import shlex
import signal
import threading
from collections.abc import Sequence

import asyncssh

from providers.errors import Unavailable
from providers.ssh.loop import LoopThread, shared_loop
from providers.ssh.target import SshTarget, connect, describe

MAX_BUFFER = 4 * 1024 * 1024  # per stream; beyond it the pump stops reading (the pipe fills, the command waits)
_PUMP_PAUSE = 0.05
_CALL_TIMEOUT = 30.0
EOF_CHAR = b"\x04"


class _Buffer:
    """Bytes handed from the loop thread to a reading thread; `read` blocks for data or EOF."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._eof = False
        self._cond = threading.Condition()

    def put(self, data: bytes) -> None:
        with self._cond:
            self._data += data
            self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def full(self) -> bool:
        with self._cond:
            return len(self._data) >= MAX_BUFFER

    def read(self, max_bytes: int) -> bytes:
        with self._cond:
            while not self._data and not self._eof:
                self._cond.wait()
            chunk = bytes(self._data[: max(1, max_bytes)])
            del self._data[: len(chunk)]
            return chunk


def exit_code(process: asyncssh.SSHClientProcess[bytes]) -> int:
    """The shell's convention: the exit status, else 128 + the signal number, else 255 (ssh's)."""
    if process.exit_signal is not None:
        number = getattr(signal, f"SIG{process.exit_signal[0]}", None)
        return 128 + int(number) if number is not None else 255
    status = process.exit_status
    return status if status is not None and status >= 0 else 255


class SshProcess:
    """A `Process` started by `start_process`; safe to use from several threads."""

    def __init__(
        self,
        loop: LoopThread,
        conn: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[bytes],
        *,
        tty: bool,
    ) -> None:
        self._loop = loop
        self._conn = conn
        self._process = process
        self._tty = tty
        self._stdout = _Buffer()
        self._stderr = _Buffer()
        self._exit: int | None = None
        self._exited = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._last_written = b"\n"
        if tty:
            self._stderr.finish()  # a PTY merges stderr into stdout
        self._watcher = loop.submit(self._watch())

    async def _pump(self, reader: asyncssh.SSHReader[bytes], buffer: _Buffer) -> None:
        try:
            while True:
                while buffer.full():
                    await asyncio.sleep(_PUMP_PAUSE)
                data = await reader.read(65536)
                if not data:
                    return
                buffer.put(data)
        except (asyncssh.Error, OSError):
            return
        finally:
            buffer.finish()

    async def _watch(self) -> None:
        """Pump output until the channel closes, record the exit code, close the connection."""
        pumps = [asyncio.ensure_future(self._pump(self._process.stdout, self._stdout))]
        if not self._tty:
            pumps.append(asyncio.ensure_future(self._pump(self._process.stderr, self._stderr)))
        try:
            await self._process.wait_closed()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._exit = exit_code(self._process)
        finally:
            for pump in pumps:
                pump.cancel()
            self._stdout.finish()
            self._stderr.finish()
            self._conn.close()
            self._exited.set()
            await self._conn.wait_closed()

    def _run(self, fn: object, *args: object) -> None:
        async def call() -> None:
            assert callable(fn)
            fn(*args)

        try:
            self._loop.run(call(), _CALL_TIMEOUT)
        except (asyncssh.Error, OSError, BrokenPipeError, TimeoutError):
            return  # the channel is closing; like a closed pipe, the request is dropped

    def write_stdin(self, data: bytes) -> None:
        if not data or self._closed or self._exited.is_set():
            return

        async def write() -> None:
            self._process.stdin.write(data)
            await self._process.stdin.drain()

        try:
            self._loop.run(write(), None)
        except (asyncssh.Error, OSError, BrokenPipeError):
            return
        self._last_written = data[-1:]

    def close_stdin(self) -> None:
        if self._tty:
            # In canonical mode EOF on a non-empty line only flushes it: send it twice then.
            self.write_stdin(EOF_CHAR if self._last_written in (b"\n", b"\r") else EOF_CHAR * 2)
            return
        if not self._closed and not self._exited.is_set():
            self._run(self._process.stdin.write_eof)

    def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return self._stdout.read(max_bytes)

    def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return self._stderr.read(max_bytes)

    def resize(self, cols: int, rows: int) -> None:
        if self._tty and not self._closed and not self._exited.is_set():
            self._run(self._process.change_terminal_size, cols, rows)

    def wait(self, timeout: float | None = None) -> int | None:
        self._exited.wait(timeout)
        return self._exit if self._exited.is_set() else None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if not self._exited.is_set():
            self._run(self._kill)
        try:
            self._watcher.result(_CALL_TIMEOUT)
        except Exception:  # noqa: BLE001 - the watcher only closes; nothing of it matters now
            pass

    def _kill(self) -> None:
        try:
            self._process.send_signal("KILL")
        except (asyncssh.Error, OSError):
            pass
        # Dropping the connection, not just the channel: sshd answers a channel close only
        # once the command's output is closed, which a command ignoring the signal never does.
        self._conn.close()


def start_process(
    target: SshTarget,
    command: str | Sequence[str],
    *,
    tty: bool,
    stdin: bool,
    term_size: tuple[int, int] = (80, 24),
    loop: LoopThread | None = None,
) -> SshProcess:
    """Run `command` (argv, quoted for the remote shell; or a shell string as is) over a
    new SSH connection. Raises `Unavailable` if the host cannot be reached or refuses."""
    runner = loop or shared_loop()
    line = command if isinstance(command, str) else shlex.join(command)

    async def start() -> SshProcess:
        conn = await connect(target)
        try:
            process = await conn.create_process(
                line,
                encoding=None,
                request_pty="force" if tty else False,
                term_type="xterm" if tty else None,
                term_size=term_size if tty else None,
            )
            if not stdin and not tty:
                process.stdin.write_eof()
        except (asyncssh.Error, OSError) as exc:
            conn.close()
            await conn.wait_closed()
            raise Unavailable(f"ssh to {target.address}: cannot start the command: {describe(exc)}") from exc
        return SshProcess(runner, conn, process, tty=tty)

    try:
        return runner.run(start(), target.connect_timeout + 30)
    except TimeoutError as exc:
        raise Unavailable(f"ssh to {target.address}: no answer in time") from exc


MAX_ANSWER = 64 * 1024  # bytes kept of a short command's output


def run_to_end(
    target: SshTarget, command: str, *, timeout: float, what: str = "the command", loop: LoopThread | None = None
) -> str:
    """The stdout (at most MAX_ANSWER bytes) of a short `command`, read to its end.
    `Unavailable` naming `what` when it does not finish within `timeout` seconds: the process
    is closed then, which ends the reads, so a host that stops answering holds no thread."""
    process = start_process(target, command, tty=False, stdin=False, loop=loop)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        process.close()

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    answer = bytearray()
    try:
        while len(answer) < MAX_ANSWER and (chunk := process.read_stdout(MAX_ANSWER)):
            answer += chunk
        finished = process.wait(timeout) is not None
    finally:
        timer.cancel()
        process.close()
    if expired.is_set() or not finished:
        raise Unavailable(f"ssh to {target.address}: {what} did not finish in {timeout:g} s")
    return answer.decode("utf-8", "replace")
