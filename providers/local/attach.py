"""`kubectl attach` for a local instance: the workload's console from now on, and its stdin.

Called by `LocalProvider.attach`. Output follows the log from its current end. Input
goes to the FIFO the supervisor gave the workload as stdin when the Pod asked for one
(`stdin: true`); the supervisor holds the FIFO open itself, so an attachment ending
never closes the workload's stdin. Never signals the workload.
Tests: tests/providers/test_attach.py.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from providers import base
from providers.errors import NotFound, Unavailable
from providers.local import folder, logs

_POLL_SECONDS = 0.1


def open_stdin(path: Path) -> int | None:
    """A write end of the workload's stdin FIFO, or None if the workload has no stdin."""
    fifo = path / folder.STDIN_FIFO
    if not fifo.exists():
        return None
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # never blocks: the supervisor holds a reader
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            return None  # the workload is gone: nobody reads
        raise Unavailable(f"cannot open the stdin of {path.name}: {exc.strerror}") from exc
    os.set_blocking(fd, True)
    return fd


class Attachment:
    """A `Process` over a running local instance."""

    def __init__(
        self, path: Path, *, stdin: bool, exit_code: Callable[[], int | None], finished: Callable[[], bool]
    ) -> None:
        """`finished` says the workload will write no more output; `exit_code` its recorded code."""
        try:
            handle = open(path / folder.LOG_FILE, "rb")  # closed by the stream
        except FileNotFoundError as exc:
            raise NotFound(f"instance {path.name} has no console") from exc
        start = handle.seek(0, os.SEEK_END)
        self._output = logs.FileLogStream(handle, base.LogOptions(follow=True), start=start, finished=finished)
        self._exit_code = exit_code
        self._lock = threading.Lock()
        self._stdin = open_stdin(path) if stdin else None

    def write_stdin(self, data: bytes) -> None:
        with self._lock:
            if self._stdin is None:
                return  # the workload has no stdin: dropped, as the kubelet does
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._stdin, view) :]
            except OSError:
                self._close_stdin_locked()

    def close_stdin(self) -> None:
        with self._lock:
            self._close_stdin_locked()

    def _close_stdin_locked(self) -> None:
        if self._stdin is not None:
            os.close(self._stdin)
            self._stdin = None

    def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return self._output.read(max_bytes)

    def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return b""  # the console merges stdout and stderr

    def resize(self, cols: int, rows: int) -> None:
        """The workload has no terminal here."""

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self._exit_code()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_SECONDS)
        return code

    def close(self) -> None:
        self._output.close()
        self.close_stdin()
