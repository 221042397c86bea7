"""Commands run inside a local instance (`kubectl exec`): pipes, or a real PTY.

Called by `LocalProvider.exec`. Each output fd is drained by its own pump thread into
a bounded buffer, so a child busy on both stdout and stderr never deadlocks the caller.
With a TTY the child is a session leader whose controlling terminal is the PTY, so
`resize` reaches it as SIGWINCH and `stty size` sees it.
Tests: tests/providers/local/test_local_exec.py.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from providers.local import pids

MAX_BUFFER = 4 * 1024 * 1024  # per stream; beyond it the pump stops reading (the pipe fills, the command waits)
_POLL_SECONDS = 0.1


class _Pump:
    """Reads one fd on a thread; `read` blocks until data or EOF."""

    def __init__(self, fd: int, name: str) -> None:
        self._fd = fd
        # poll, not select: select refuses a descriptor numbered 1024 or more, which a busy
        # manager (many Pods, streams and clients) reaches.
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR)
        self._buffer = bytearray()
        self._eof = False
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._cond:
                    if len(self._buffer) >= MAX_BUFFER:
                        self._cond.wait(_POLL_SECONDS)
                        continue
                if not self._poller.poll(_POLL_SECONDS * 1000):
                    continue
                try:
                    data = os.read(self._fd, 65536)
                except OSError as exc:
                    if exc.errno != errno.EIO:  # EIO: the PTY's other side is closed, i.e. EOF
                        raise
                    data = b""
                if not data:
                    break
                with self._cond:
                    self._buffer += data
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def read(self, max_bytes: int) -> bytes:
        with self._cond:
            while not self._buffer and not self._eof:
                self._cond.wait()
            chunk = bytes(self._buffer[:max_bytes])
            del self._buffer[:max_bytes]
            self._cond.notify_all()
            return chunk

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _take_controlling_terminal() -> None:
    # Runs in the child after setsid(): make the PTY on stdin our controlling terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class LocalProcess:
    """A `Process`: a command started by `start_process`."""

    def __init__(self, popen: subprocess.Popen[bytes], *, master: int | None) -> None:
        self._popen = popen
        self._master = master
        self._stdin: IO[bytes] | None = popen.stdin
        self._last_written = b"\n"
        self._closed = False
        self._lock = threading.Lock()  # guards _closed
        self._fd_lock = threading.Lock()  # no fd is used while close() frees it
        if master is not None:
            self._stdout = _Pump(master, f"exec-{popen.pid}-tty")
            self._stderr: _Pump | None = None
        else:
            assert popen.stdout is not None and popen.stderr is not None
            self._stdout = _Pump(popen.stdout.fileno(), f"exec-{popen.pid}-out")
            self._stderr = _Pump(popen.stderr.fileno(), f"exec-{popen.pid}-err")

    def write_stdin(self, data: bytes) -> None:
        with self._fd_lock:
            if not data or self._closed:
                return
            try:
                if self._master is not None:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(self._master, view) :]
                elif self._stdin is not None and not self._stdin.closed:
                    self._stdin.write(data)
                    self._stdin.flush()
            except OSError:
                return  # the command stopped reading; like a closed pipe, the rest is dropped
            self._last_written = data[-1:]

    def close_stdin(self) -> None:
        if self._master is not None:
            with self._fd_lock:
                if self._closed:
                    return
                eof = termios.tcgetattr(self._master)[6][termios.VEOF]
            eof_byte = eof if isinstance(eof, bytes) else bytes([eof])
            # In canonical mode EOF on a non-empty line only flushes it: send it twice then.
            self.write_stdin(eof_byte if self._last_written == b"\n" else eof_byte * 2)
            return
        with self._fd_lock:
            if self._stdin is not None and not self._stdin.closed:
                try:
                    self._stdin.close()
                except BrokenPipeError:
                    pass

    def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return self._stdout.read(max_bytes)

    def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return self._stderr.read(max_bytes) if self._stderr is not None else b""

    def resize(self, cols: int, rows: int) -> None:
        with self._fd_lock:
            if self._master is not None and not self._closed:
                fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return pids.exit_code_from_returncode(self._popen.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._popen.poll() is None:
            try:
                os.killpg(self._popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._popen.wait()
        for pump in (self._stdout, self._stderr):
            if pump is not None:
                pump.stop()
        with self._fd_lock:
            for stream in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except BrokenPipeError:
                        pass
            if self._master is not None:
                os.close(self._master)


def start_process(argv: Sequence[str], *, cwd: str, env: Mapping[str, str], tty: bool, stdin: bool) -> LocalProcess:
    """Start `argv` (no shell) in its own session; raises OSError if it cannot start."""
    if not tty:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
        return LocalProcess(popen, master=None)
    master, slave = pty.openpty()
    try:
        popen = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            preexec_fn=_take_controlling_terminal,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return LocalProcess(popen, master=master)
