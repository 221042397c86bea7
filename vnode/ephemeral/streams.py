"""The output side of one ephemeral container's process: a pump that reads it once and hands
every byte to the attached clients (`kubectl attach`, `kubectl debug -it`) and a bounded log.

`vnode.ephemeral.containers` starts a `Fanout` per process; the kubelet API gets an `Attachment` (a
`Process` whose close detaches, never kills) or a `LogReader`. Never writes to the API.
Tests: tests/vnode/test_ephemeral.py
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from providers.base import Process

LOG_LIMIT = 4 * 1024 * 1024  # the newest bytes kept for `kubectl logs -c <ephemeral>`
_EOF = b""


class Fanout:
    """Reads the process's stdout and stderr on two threads until EOF; thread-safe."""

    def __init__(self, process: Process, *, tty: bool, stdin_once: bool, on_exit: Callable[[int], None]) -> None:
        self.process = process
        self._tty = tty
        self.stdin_once = stdin_once
        self._on_exit = on_exit
        self._lock = threading.Lock()
        self._clients: list[tuple[queue.Queue[bytes], queue.Queue[bytes]]] = []
        self._log = bytearray()
        self._dropped = 0  # bytes cut off the log's front
        self._log_changed = threading.Condition(self._lock)
        self._open_streams = 1 if tty else 2
        self.ended = False

    def start(self) -> None:
        threading.Thread(target=self._pump, args=(False,), name="ephemeral stdout", daemon=True).start()
        if not self._tty:
            threading.Thread(target=self._pump, args=(True,), name="ephemeral stderr", daemon=True).start()

    def _pump(self, stderr: bool) -> None:
        read = self.process.read_stderr if stderr else self.process.read_stdout
        while True:
            try:
                data = read(65536)
            except OSError:
                data = _EOF
            with self._lock:
                if data:
                    self._log += data
                    excess = max(0, len(self._log) - LOG_LIMIT)
                    del self._log[:excess]
                    self._dropped += excess
                for out, err in self._clients:
                    (err if stderr else out).put(data)
                self._log_changed.notify_all()
                if data:
                    continue
                self._open_streams -= 1
                last = self._open_streams == 0
            break
        if last:
            code = self.process.wait()
            self.process.close()  # frees its pipes; the exit code is kept below
            with self._lock:
                self.ended = True
                self._log_changed.notify_all()
            self._on_exit(-1 if code is None else code)

    def attach(self) -> Attachment:
        out: queue.Queue[bytes] = queue.Queue()
        err: queue.Queue[bytes] = queue.Queue()
        with self._lock:
            if self.ended:
                out.put(_EOF)
            if self.ended or self._tty:
                err.put(_EOF)
            self._clients.append((out, err))
        return Attachment(self, out, err)

    def detach(self, attachment: Attachment) -> None:
        with self._lock:
            self._clients = [c for c in self._clients if c != (attachment.out, attachment.err)]
        attachment.out.put(_EOF)
        attachment.err.put(_EOF)

    def log_reader(self, *, follow: bool, tail_lines: int | None = None, limit_bytes: int | None = None) -> LogReader:
        """A reader from the first kept byte, or from the last `tail_lines` lines kept."""
        with self._lock:
            text, start = bytes(self._log), self._dropped
        end = None if follow else start + len(text)  # a one-shot read is the log as it is now
        if tail_lines is not None:
            lines = text.splitlines(keepends=True)
            kept = lines[len(lines) - tail_lines :] if tail_lines < len(lines) else lines
            start += len(text) - sum(len(line) for line in kept)
        if end is not None:
            limit_bytes = end - start if limit_bytes is None else min(limit_bytes, end - start)
        return LogReader(self, follow=follow, start=start, limit_bytes=limit_bytes)

    def read_log(self, offset: int, *, follow: bool, closed: threading.Event) -> tuple[int, bytes]:
        """The log from absolute `offset` (bytes cut off the front are skipped) and where that
        data starts; b"" at the end."""
        with self._lock:
            while follow and self._dropped + len(self._log) <= offset and not self.ended and not closed.is_set():
                self._log_changed.wait(0.5)
            start = max(offset, self._dropped)
            return start, bytes(self._log[start - self._dropped :])

    def wake(self) -> None:
        with self._lock:
            self._log_changed.notify_all()


class Attachment:
    """One client's view of the process: its stdin, its output from now on. `close` detaches."""

    def __init__(self, fanout: Fanout, out: queue.Queue[bytes], err: queue.Queue[bytes]) -> None:
        self._fanout = fanout
        self.out, self.err = out, err
        self._out_done = self._err_done = False

    def write_stdin(self, data: bytes) -> None:
        self._fanout.process.write_stdin(data)

    def close_stdin(self) -> None:
        """The client's stdin ended: the container's ends too only with `stdinOnce`, as a
        container runtime does; otherwise the next attach can still type into it."""
        if self._fanout.stdin_once:
            self._fanout.process.close_stdin()

    def read_stdout(self, max_bytes: int = 65536) -> bytes:
        if self._out_done:
            return _EOF
        data = self.out.get()
        self._out_done = not data
        return data

    def read_stderr(self, max_bytes: int = 65536) -> bytes:
        if self._err_done:
            return _EOF
        data = self.err.get()
        self._err_done = not data
        return data

    def resize(self, cols: int, rows: int) -> None:
        self._fanout.process.resize(cols, rows)

    def wait(self, timeout: float | None = None) -> int | None:
        return self._fanout.process.wait(timeout)

    def close(self) -> None:
        self._fanout.detach(self)


class LogReader:
    """A `LogStream` over the kept output; with `follow`, until the process ends."""

    def __init__(self, fanout: Fanout, *, follow: bool, start: int = 0, limit_bytes: int | None = None) -> None:
        self._fanout = fanout
        self._follow = follow
        self._offset = start
        self._left = limit_bytes
        self._closed = threading.Event()

    def read(self, max_bytes: int = 65536) -> bytes:
        if self._closed.is_set() or self._left == 0:
            return _EOF
        start, data = self._fanout.read_log(self._offset, follow=self._follow, closed=self._closed)
        data = data[: max_bytes if self._left is None else min(max_bytes, self._left)]
        self._offset = start + len(data)
        if self._left is not None:
            self._left -= len(data)
        return data

    def close(self) -> None:
        self._closed.set()
        self._fanout.wake()
