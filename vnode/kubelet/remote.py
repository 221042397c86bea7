"""One exec or attach session, independent of the transport (SPDY or websocket).

Built by the SPDY protocol and the websocket consumer once their streams exist. Runs the
provider's blocking calls on the session's own threads, never on the reactor: one starts
the command and waits for it, one pumps stdout, one stderr, one feeds stdin and resizes.
The transport's `Outlet` is called from those threads. A client that goes away (`abort`)
kills the command and frees everything. THREADS_PER_SESSION threads at most (3 with a tty):
`on_end` (the process-wide cap's give-back) is called once, when the last of them is done
(or at `abort` of a session never started).
Tests: tests/vnode/kubelet/test_exec_sessions.py.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol

from kube import observe
from providers.base import Process
from vnode.kubelet.execparams import StreamRequest
from vnode.kubelet.problems import Problem, exec_status_bytes

logger = logging.getLogger(__name__)

READ_SIZE = 128 * 1024  # per hop from a pump thread to the transport (which frames it smaller)
MAX_RESIZE_LINE = 1024  # I7: a resize message is about 30 bytes
STDIN_HIGH_WATER = 4 * 1024 * 1024  # queued stdin bytes at which the transport stops reading
STDIN_LOW_WATER = 1024 * 1024
STDIN_MAX = 16 * 1024 * 1024  # queued stdin that ends a session whose client cannot be paused (a websocket)
THREADS_PER_SESSION = 4  # main (start, wait), stdout pump, stderr pump (none with a tty), stdin feeder


class Outlet(Protocol):
    """The transport seen from the session. Every method is called from session threads
    and may block (that is the back-pressure towards the command)."""

    def write(self, stream: str, data: bytes) -> None:
        """Send output on `stream` ("stdout" or "stderr")."""
        ...

    def close_stream(self, stream: str) -> None:
        """No more output on `stream`."""
        ...

    def finish(self, status: bytes) -> None:
        """Write `status` on the error channel, close everything, end the connection."""
        ...

    def pause_input(self, paused: bool) -> None:
        """Stop (True) or resume (False) reading from the client: stdin is backing up."""
        ...


class RemoteSession:
    """Start with `start()`; feed client input with `stdin`, `stdin_eof`, `resize`; call
    `abort()` when the client is gone. Input methods never block (reactor-safe)."""

    def __init__(
        self,
        start_process: Callable[[], Process],
        request: StreamRequest,
        outlet: Outlet,
        *,
        json_status: bool,
        attach: bool,
        name: str = "exec",
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self._start_process = start_process
        self._on_end = once(on_end) if on_end is not None else None
        self._started = False
        self._request = request
        self._outlet = outlet
        self._json_status = json_status
        self._attach = attach
        self._name = name
        self._inbox: queue.SimpleQueue[tuple[str, bytes | tuple[int, int]] | None] = queue.SimpleQueue()
        self._queued = 0
        self._paused = False
        self._lock = threading.Lock()
        self._process: Process | None = None
        self._aborted = threading.Event()
        self._resize_buffer = b""

    # -- input from the client (any thread, never blocks) -----------------------------------
    def stdin(self, data: bytes) -> None:
        if not data or self._aborted.is_set():
            return
        with self._lock:
            self._queued += len(data)
            pause = not self._paused and self._queued >= STDIN_HIGH_WATER
            self._paused = self._paused or pause
            over = self._queued > STDIN_MAX
        if over:  # the outlet did not pause its client (Channels cannot): I7, end here
            self._overflow()
            return
        self._inbox.put(("stdin", data))
        if pause:
            self._outlet.pause_input(True)

    def _overflow(self) -> None:
        logger.warning(
            "%s: over %d bytes of stdin queued that the command has not read; ending it", self._name, STDIN_MAX
        )
        failure = Problem(413, f"over {STDIN_MAX} bytes of stdin sent that the command has not read")
        self.abort()  # first: the session's own end then says nothing more
        self._outlet.finish(exec_status_bytes(None, failure, attach=self._attach, json_status=self._json_status))

    def stdin_eof(self) -> None:
        self._inbox.put(("eof", b""))

    def resize(self, data: bytes) -> None:
        """Bytes of the resize stream: JSON objects, one per line (`{"Width":80,"Height":24}`)."""
        self._resize_buffer += data
        *lines, self._resize_buffer = self._resize_buffer.split(b"\n")
        if len(self._resize_buffer) > MAX_RESIZE_LINE:
            self._resize_buffer = b""  # not a resize message; drop it rather than grow
        for line in lines:
            size = parse_resize(line)
            if size is not None:
                self._inbox.put(("resize", size))

    def abort(self) -> None:
        """The client is gone: kill the command and stop every thread."""
        if self._aborted.is_set():
            return
        self._aborted.set()
        self._inbox.put(None)
        with self._lock:
            process = self._process
            started = self._started
        if process is not None:
            _close_quietly(process)
        if not started:
            self._ended()

    def _ended(self) -> None:
        if self._on_end is not None:
            self._on_end()

    # -- the session's threads ------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        try:
            self._spawn(self._run, "main")
        except BaseException:
            self._ended()
            raise

    def _spawn(self, target: Callable[[], None], role: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=f"kubelet-{self._name}-{role}", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        kind = "attach" if self._attach else "exec"
        observe.current().stream_opened(kind)
        feeder: threading.Thread | None = None
        try:
            feeder = self._serve()
        finally:
            observe.current().stream_closed(kind)
            if feeder is not None:
                feeder.join()  # its place (and thread) is the session's until it is done
            self._ended()

    def _serve(self) -> threading.Thread | None:
        """Start the command, pump until its output ends, report its exit, clean up; the
        stdin feeder (ending once `None` is queued), if it was started."""
        try:
            process = self._start_process()
        except Exception as exc:  # the provider's error becomes the error channel's message
            self._outlet.finish(exec_status_bytes(None, exc, attach=self._attach, json_status=self._json_status))
            return None
        with self._lock:
            self._process = process
        if self._aborted.is_set():
            _close_quietly(process)
            return None
        pumps = [self._spawn(lambda: self._pump(process.read_stdout, "stdout", self._request.stdout), "stdout")]
        if not self._request.tty:
            pumps.append(self._spawn(lambda: self._pump(process.read_stderr, "stderr", self._request.stderr), "stderr"))
        feeder = self._spawn(lambda: self._feed(process), "stdin")
        for pump in pumps:
            pump.join()
        failure: BaseException | None = None
        code: int | None = None
        try:
            code = process.wait(None if not self._attach else 0)
        except Exception as exc:
            failure = exc
        if not self._aborted.is_set():
            self._outlet.finish(exec_status_bytes(code, failure, attach=self._attach, json_status=self._json_status))
        self._inbox.put(None)
        _close_quietly(process)
        return feeder

    def _pump(self, read: Callable[[int], bytes], stream: str, wanted: bool) -> None:
        try:
            while not self._aborted.is_set():
                data = read(READ_SIZE)
                if not data:
                    break
                if wanted:
                    self._outlet.write(stream, data)
        except Exception:
            logger.warning("%s: reading %s failed", self._name, stream, exc_info=True)
        if wanted and not self._aborted.is_set():
            self._outlet.close_stream(stream)

    def _feed(self, process: Process) -> None:
        """stdin and resizes, in the order the client sent them."""
        while (item := self._inbox.get()) is not None:
            kind, value = item
            try:
                if kind == "stdin":
                    assert isinstance(value, bytes)
                    process.write_stdin(value)
                    self._drained(len(value))
                elif kind == "eof":
                    process.close_stdin()
                elif kind == "resize" and isinstance(value, tuple):
                    process.resize(*value)
            except Exception:
                logger.warning("%s: %s failed", self._name, kind, exc_info=True)

    def _drained(self, size: int) -> None:
        with self._lock:
            self._queued -= size
            resume = self._paused and self._queued <= STDIN_LOW_WATER
            self._paused = self._paused and not resume
        if resume:
            self._outlet.pause_input(False)


def parse_resize(line: bytes) -> tuple[int, int] | None:
    """(cols, rows) from one resize message; field names are matched case-insensitively,
    as Go's JSON decoder does. None for anything else."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    fields = {str(k).lower(): v for k, v in data.items()}
    width, height = fields.get("width"), fields.get("height")
    if not all(isinstance(v, int) and 0 <= v <= 0xFFFF for v in (width, height)):
        return None
    assert isinstance(width, int) and isinstance(height, int)
    return width, height


def once(call: Callable[[], None]) -> Callable[[], None]:
    """`call`, done at most once however often (and from whichever threads) it is called."""
    lock, done = threading.Lock(), [False]

    def first() -> None:
        with lock:
            if done[0]:
                return
            done[0] = True
        call()

    return first


def _close_quietly(process: Process) -> None:
    try:
        process.close()
    except Exception:
        logger.warning("closing a remote command failed", exc_info=True)
