"""`kubectl exec` in a Modal sandbox: a `Process` over the SDK's `Sandbox.exec`
(`ContainerProcess`, bytes mode, `pty` for a TTY).

Called by `ModalProvider.exec`. One reader thread per output stream fills a buffer the
blocking reads take from; a waiter thread learns the exit code. Modal's exec has no
window-size call: a TTY starts at the client's first size, and a later size is applied by
the provider's `resize` callable (a helper exec that sets the terminal's size, see
`providers.modal.provider`) on a thread of its own, the newest size only, so stdin never
waits for it. `close` stops reading (Modal ends the command when its session is dropped or
its timeout passes).
Tests: tests/providers/modal/test_modal_provider_exec.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from providers.errors import ProviderError
from providers.modal.classify import sdk_errors, translate

logger = logging.getLogger(__name__)


class _Pipe:
    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False
        self.cond = threading.Condition()

    def feed(self, chunk: bytes | None) -> None:
        with self.cond:
            if chunk is None:
                self.eof = True
            else:
                self.data += chunk
            self.cond.notify_all()

    def read(self, max_bytes: int) -> bytes:
        with self.cond:
            self.cond.wait_for(lambda: self.data or self.eof)
            chunk = bytes(self.data[:max_bytes])
            del self.data[:max_bytes]
            return chunk


FIRST_SIZE_WAIT = 1.0  # seconds a TTY exec waits for the client's terminal size before it starts
DEFAULT_SIZE = (24, 80)  # rows, columns: a TTY whose client sent no size in time


class ModalProcess:
    """`start(rows, cols)` runs the SDK's `Sandbox.exec` and returns its `ContainerProcess`.
    Modal takes a TTY's size only when the command starts (its `PTYInfo`) and has no resize
    call, so a TTY exec starts on the client's first size (kubectl sends it at once), or at
    24x80 after FIRST_SIZE_WAIT; a later size goes to `resize(rows, cols)` if given
    (docs/providers/modal.md)."""

    def __init__(
        self, start: Callable[[int, int], Any], *, tty: bool, resize: Callable[[int, int], bool] | None = None
    ) -> None:
        self._start = start
        self._tty = tty
        self._resizer = _Resizer(resize) if tty and resize is not None else None
        self._process: Any = None
        self._failure: ProviderError | None = None
        self._started = threading.Event()
        self._start_lock = threading.Lock()
        self._closed = False
        self._pending: list[bytes | None] = []  # stdin sent before a TTY command started (None: EOF)
        self._stdout, self._stderr = _Pipe(), _Pipe()
        self._exit: int | None = None
        self._exited = threading.Event()
        if tty:
            self._stderr.feed(None)
            timer = threading.Timer(FIRST_SIZE_WAIT, self._begin, DEFAULT_SIZE)
            timer.daemon = True
            timer.start()
        else:
            self._begin(*DEFAULT_SIZE)
            self._raise_if_failed()

    def _begin(self, rows: int, cols: int) -> bool:
        """Start the command once, at the first size; False if it had started already. A
        failure ends the streams."""
        with self._start_lock:
            if self._started.is_set():
                return False
            try:
                with sdk_errors():
                    self._process = self._start(rows, cols)
            except ProviderError as exc:
                self._failure = exc
                logger.info("modal exec did not start: %s", exc)
                self._exit = 126
                for pipe in (self._stdout, self._stderr):
                    pipe.feed(None)
                self._exited.set()
                self._started.set()
                return True
            self._started.set()
            if self._resizer is not None:
                self._resizer.started_at(rows, cols)
            pending, self._pending = self._pending, []
            try:
                for item in pending:  # under the lock: nothing sent later can overtake it
                    self._send(self._process, item)
            except ProviderError as exc:
                logger.info("modal exec stdin failed: %s", exc)
        process = self._process
        streams = [(process.stdout, self._stdout)] + ([] if self._tty else [(process.stderr, self._stderr)])
        for stream, pipe in streams:
            threading.Thread(target=self._pump, args=(stream, pipe), daemon=True, name="modal-exec-read").start()
        threading.Thread(target=self._wait, daemon=True, name="modal-exec-wait").start()
        return True

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _running(self) -> Any:
        self._started.wait()
        self._raise_if_failed()
        return self._process

    def __repr__(self) -> str:
        return f"ModalProcess(exit={self._exit!r})"

    def _pump(self, stream: Any, pipe: _Pipe) -> None:
        try:
            for chunk in stream:
                pipe.feed(chunk.encode() if isinstance(chunk, str) else bytes(chunk))
        except Exception as exc:  # the stream broke: EOF for the reader, the reason in the log
            self._note("modal exec stream ended: %s", translate(exc))
        finally:
            pipe.feed(None)

    def _wait(self) -> None:
        try:
            self._exit = int(self._process.wait())
        except Exception as exc:
            self._note("modal exec wait failed: %s", translate(exc))
            self._exit = 255
        finally:
            self._exited.set()

    def write_stdin(self, data: bytes) -> None:
        self._stdin(data)

    def close_stdin(self) -> None:
        self._stdin(None)

    def _stdin(self, item: bytes | None) -> None:
        """Send stdin (None: EOF); a TTY command not started yet (no size) keeps it until then,
        since kubectl may send keystrokes before the terminal's size."""
        with self._start_lock:
            if not self._started.is_set():
                self._pending.append(item)
                return
        self._send(self._running(), item)

    @staticmethod
    def _send(process: Any, item: bytes | None) -> None:
        with sdk_errors():
            if item is None:
                process.stdin.write_eof()
            else:
                process.stdin.write(item)
            process.stdin.drain()

    def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return self._stdout.read(max_bytes)

    def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return self._stderr.read(max_bytes)

    def resize(self, cols: int, rows: int) -> None:
        """The first size starts a TTY command at it; a later one goes to the resizer."""
        if not self._tty or self._begin(rows, cols):
            return
        if self._resizer is not None and self._failure is None:
            self._resizer.want(rows, cols)

    def wait(self, timeout: float | None = None) -> int | None:
        return self._exit if self._exited.wait(timeout) else None

    def _note(self, message: str, reason: ProviderError) -> None:
        """A stream's end: news while the session is open, expected (debug) once it is closed."""
        logger.log(logging.DEBUG if self._closed else logging.INFO, message, reason)

    def close(self) -> None:
        self._closed = True
        with self._start_lock:  # a TTY closed before its first size is never started (no stray exec)
            if not self._started.is_set():
                self._failure = ProviderError("modal exec: the session ended before the command started")
                self._started.set()
                self._exited.set()
        if self._resizer is not None:
            self._resizer.close()
        self._stdout.feed(None)
        self._stderr.feed(None)


class _Resizer:
    """Applies the newest wanted size with `apply(rows, cols)` (True when it took) on its own
    thread, one at a time; a size already in place is not applied again. The first failure is
    logged at info (the image may lack `sh` or `stty`), later ones at debug."""

    def __init__(self, apply: Callable[[int, int], bool]) -> None:
        self._apply = apply
        self._cond = threading.Condition()
        self._wanted: tuple[int, int] | None = None
        self._applied: tuple[int, int] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._failed = False

    def started_at(self, rows: int, cols: int) -> None:
        with self._cond:
            self._applied = self._applied or (rows, cols)

    def want(self, rows: int, cols: int) -> None:
        with self._cond:
            if self._closed:
                return
            self._wanted = (rows, cols)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="modal-exec-resize")
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _pending(self) -> bool:
        return self._closed or (self._wanted is not None and self._wanted != self._applied)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._pending)
                if self._closed or self._wanted is None:
                    return
                size = self._wanted
            try:
                took = self._apply(*size)
            except Exception as exc:  # a broken session: the size stays, the exec goes on
                logger.debug("modal exec resize raised %s", type(exc).__name__)
                took = False
            with self._cond:
                self._applied = size  # applied or not, do not retry the same size
            if not took:
                level = logging.DEBUG if self._failed else logging.INFO
                logger.log(level, "modal exec: the terminal could not be resized to %dx%d", *size)
                self._failed = True
