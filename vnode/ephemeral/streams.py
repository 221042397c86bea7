"""The output side of one ephemeral container's process: a pump that reads it once and hands
every byte to the attached clients (`kubectl attach`, `kubectl debug -it`) and to its kept output
(`vnode.ephemeral.ring`), within the process's budget (`vnode.ephemeral.budget`).

`vnode.ephemeral.containers` starts a `Fanout` per process and releases it when the Pod goes; the
kubelet API gets an `Attachment` (a `Process` whose close detaches, never kills) or a `LogReader`.
Never writes to the API; never calls the budget while holding its own lock.
Tests: tests/vnode/test_ephemeral.py, tests/vnode/test_ephemeral_budget.py
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from providers import errors
from providers.base import Process
from vnode.ephemeral import trim
from vnode.ephemeral.budget import PER_CONTAINER, OutputBudget
from vnode.ephemeral.ring import KeptOutput

LOG_LIMIT = PER_CONTAINER  # the newest bytes kept for `kubectl logs -c <ephemeral>`, the budget permitting
_EOF = b""
READ_SIZE = 65536
CLIENT_CHUNKS = 8  # I7: output chunks (of READ_SIZE at most) queued per attached client stream
SLOW_CLIENT = 60.0  # seconds an attached client may keep its queue full before it is detached
_RECHECK = 0.2  # seconds between two looks at whether a client waited for is still attached


class Fanout:
    """Reads the process's stdout and stderr on two threads until EOF; thread-safe."""

    def __init__(
        self,
        process: Process,
        *,
        tty: bool,
        stdin_once: bool,
        on_exit: Callable[[int], None],
        budget: OutputBudget,
        on_dropped: Callable[[int, bool], None] = lambda lost, whole: None,
    ) -> None:
        self.process = process
        self._tty = tty
        self.stdin_once = stdin_once
        self._on_exit = on_exit
        self._budget = budget
        self._on_dropped = on_dropped
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # the two pumps append one at a time (never the budget's)
        self._clients: list[tuple[queue.Queue[bytes], queue.Queue[bytes]]] = []
        self.detached_slow = 0  # attached clients detached for leaving their queue full (I7)
        self._log = KeptOutput()
        self.lost = 0  # bytes of its output the budget dropped (all of it once `gone`)
        self.gone = False  # its whole output was dropped for the budget
        self._log_changed = threading.Condition(self._lock)
        self._open_streams = 1 if tty else 2
        self.ended = False
        budget.join(self)

    def start(self) -> None:
        threading.Thread(target=self._pump, args=(False,), name="ephemeral stdout", daemon=True).start()
        if not self._tty:
            threading.Thread(target=self._pump, args=(True,), name="ephemeral stderr", daemon=True).start()

    def _pump(self, stderr: bool) -> None:
        read = self.process.read_stderr if stderr else self.process.read_stdout
        while True:
            try:
                data = read(READ_SIZE)
            except OSError:
                data = _EOF
            with self._writing:
                if data:
                    with self._lock:
                        chunks = self._log.chunks_for(len(data))
                    self._budget.reserve(self, chunks)  # may drop others' output, or this one's oldest
                with self._lock:
                    self._log.append(data)
                    clients = list(self._clients)
                    self._log_changed.notify_all()
                    if not data:
                        self._open_streams -= 1
                        last = self._open_streams == 0
                self._deliver(clients, data, stderr)  # under `_writing` only: may wait for a client
                if data:
                    continue
            break
        if last:
            code = self.process.wait()
            self.process.close()  # frees its pipes; the exit code is kept below
            self._budget.ended(self)  # before `ended` reads true: whoever waits for it finds the budget told
            with self._lock:
                self.ended = True
                self._log_changed.notify_all()
            self._on_exit(-1 if code is None else code)
            trim.give_back_freed()  # what its pumps' reads freed (I7)

    def release(self) -> None:
        """Its Pod is gone: close the process, unmap the kept output, leave the budget."""
        try:
            self.process.close()
        finally:
            self._budget.leave(self)
            self.wake()
            trim.give_back_freed()

    # -- the budget's member (vnode.ephemeral.budget.Member) -------------------------------
    def kept_chunks(self) -> int:
        with self._lock:
            return self._log.chunks

    def drop_kept(self, chunks: int | None) -> tuple[int, int]:
        with self._lock:
            before = self._log.start
            if chunks is None:
                freed = self._log.close()
            else:
                freed = self._log.drop_front(max(0, min(chunks, self._log.chunks - 1)))
            self._log_changed.notify_all()
            return freed, self._log.start - before

    def told_dropped(self, lost: int, *, whole: bool) -> None:
        with self._lock:
            self.lost += lost
            self.gone = self.gone or whole
        self._on_dropped(lost, whole)

    # -- clients ---------------------------------------------------------------------------
    def _deliver(self, clients: list[tuple[queue.Queue[bytes], queue.Queue[bytes]]], data: bytes, stderr: bool) -> None:
        """Hand `data` to every attached client: a client whose queue is full holds the output
        back (as a container runtime's attach does), for SLOW_CLIENT seconds at most; then it
        is detached (its attach ends), and the output goes on for the others."""
        for out, err in clients:
            chunks = err if stderr else out
            deadline = time.monotonic() + SLOW_CLIENT
            while True:
                try:
                    chunks.put(data, timeout=min(_RECHECK, max(0.0, deadline - time.monotonic())))
                    break
                except queue.Full:
                    with self._lock:
                        attached = (out, err) in self._clients
                        slow = attached and time.monotonic() >= deadline
                        if slow:
                            self._clients = [c for c in self._clients if c != (out, err)]
                            self.detached_slow += 1
                    if slow:
                        _end(out)
                        _end(err)
                    if not attached or slow:
                        break  # it left (its attach ended) or was detached: on to the others

    def attach(self) -> Attachment:
        out: queue.Queue[bytes] = queue.Queue(CLIENT_CHUNKS)
        err: queue.Queue[bytes] = queue.Queue(CLIENT_CHUNKS)
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
        _end(attachment.out)
        _end(attachment.err)

    def log_reader(self, *, follow: bool, tail_lines: int | None = None, limit_bytes: int | None = None) -> LogReader:
        """A reader from the first kept byte, or from the last `tail_lines` lines kept;
        NotFound saying so when the budget dropped the whole output."""
        with self._lock:
            if self.gone:
                raise errors.NotFound(
                    f"its output ({self.lost} bytes) was dropped: the manager keeps at most {self._budget.limit} "
                    "bytes of ephemeral containers' output (NEBULA['EPHEMERAL_OUTPUT_BUDGET']), "
                    "and drops the output of the one that ended first when it needs room"
                )
            start, end = self._log.start, self._log.end
            if tail_lines is not None:
                start = self._log.tail_start(tail_lines)
        if not follow:  # a one-shot read is the log as it is now
            limit_bytes = end - start if limit_bytes is None else min(limit_bytes, end - start)
        return LogReader(self, follow=follow, start=start, limit_bytes=limit_bytes)

    def read_log(self, offset: int, *, follow: bool, closed: threading.Event, size: int) -> tuple[int, bytes]:
        """Up to `size` bytes of the log from absolute `offset` (bytes cut off the front are
        skipped) and where they start; b"" at the end."""
        with self._lock:
            while follow and self._log.end <= offset and not self.ended and not closed.is_set():
                self._log_changed.wait(0.5)
            return self._log.read(offset, size)

    def wake(self) -> None:
        with self._lock:
            self._log_changed.notify_all()


def _end(chunks: queue.Queue[bytes]) -> None:
    """The client's stream ends now: what it has not read is dropped, then EOF."""
    while True:
        try:
            chunks.put_nowait(_EOF)
            return
        except queue.Full:
            try:
                chunks.get_nowait()
            except queue.Empty:
                pass


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
        size = max_bytes if self._left is None else min(max_bytes, self._left)
        start, data = self._fanout.read_log(self._offset, follow=self._follow, closed=self._closed, size=size)
        self._offset = start + len(data)
        if self._left is not None:
            self._left -= len(data)
        return data

    def close(self) -> None:
        self._closed.set()
        self._fanout.wake()
