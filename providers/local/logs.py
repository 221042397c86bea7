"""Read an instance's log as the kubelet would serve it.

Called by `LocalProvider.logs` and the attachment. The supervisor (`supervisor.
OutputRecorder`) appends the workload's output, byte for byte as it came, to `LOG_FILE`,
and for every chunk it received, before the chunk, one entry in `LOG_INDEX_FILE`: the
chunk's offset and its arrival time. A line's time is that of the chunk holding its
first byte. So a plain read is a file copy, and only `timestamps` and `since` walk the
lines, with the index beside them. `tail_lines` counts newlines backwards in blocks
(never reading the whole file), `limit_bytes` cuts the output, `follow` polls for new
output until the workload exited and the file is drained (`read_nowait` is one step of
that, for the kubelet's follower pool). A restarted instance keeps its
previous run's log and index in `PREVIOUS_DIR`, read the same way.
Tests: tests/providers/local/test_local_logs.py.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from providers import base
from providers.errors import Unavailable
from providers.local import stamp
from providers.local.folder import INDEX_ENTRY, LOG_FILE, LOG_INDEX_FILE

POLL_SECONDS = 0.05
_READ_BLOCK = 256 * 1024
_INDEX_BATCH = 4096  # entries read at a time


def tail_offset(handle: BinaryIO, lines: int) -> int:
    """The offset where the last `lines` lines begin (a last line without its newline
    counts), reading backwards in growing blocks, so a big file is not read in full."""
    size = handle.seek(0, 2)
    if lines <= 0:
        return size
    block = _READ_BLOCK
    while True:
        pos = max(0, size - block)
        handle.seek(pos)
        data = handle.read(size - pos)
        found = len(data) - 1 if data.endswith(b"\n") else len(data)  # that newline ends the last line
        for _ in range(lines):
            found = data.rfind(b"\n", 0, found)
            if found < 0:
                break
        if found >= 0:
            return pos + found + 1
        if pos == 0:
            return 0
        block *= 2


def open_stream(run_dir: Path, options: base.LogOptions, *, finished: Callable[[], bool]) -> FileLogStream:
    """The log kept in folder `run_dir` (an instance's, or its previous run's) read with
    `options`; `finished` says no more output will come. FileNotFoundError if there is no
    log there; other OSErrors as they come."""
    handle = open(run_dir / LOG_FILE, "rb")  # closed by the stream
    index = None
    try:
        start = tail_offset(handle, options.tail_lines) if options.tail_lines is not None else 0
        if options.timestamps or options.since is not None:
            index = open(run_dir / LOG_INDEX_FILE, "rb")  # closed by the stream
        return FileLogStream(handle, options, start=start, finished=finished, index=index)
    except BaseException:
        handle.close()
        if index is not None:
            index.close()
        raise


class StampIndex:
    """When each byte of the log arrived, read forward from a starting offset."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._entries: deque[tuple[int, int]] = deque()  # entries after the current one
        self._current: tuple[int, int] | None = None
        self._partial = b""  # an entry still being written

    def seek(self, offset: int) -> None:
        """Position on the last entry at or before `offset` (binary search over the file)."""
        count = self._handle.seek(0, 2) // INDEX_ENTRY.size
        low, high = 0, count  # the answer is the last entry in [low, high) with an offset <= `offset`
        while high - low > 1:
            middle = (low + high) // 2
            self._handle.seek(middle * INDEX_ENTRY.size)
            if INDEX_ENTRY.unpack(self._handle.read(INDEX_ENTRY.size))[0] <= offset:
                low = middle
            else:
                high = middle
        self._handle.seek(low * INDEX_ENTRY.size)
        self._entries.clear()
        self._partial = b""
        self._current = None
        self.ns_at(offset)

    def ns_at(self, offset: int) -> int:
        """The arrival time of the byte at `offset`; offsets asked for never go down."""
        while True:
            if not self._entries and not self._load():
                break
            if self._entries[0][0] > offset:
                break
            self._current = self._entries.popleft()
        return self._current[1] if self._current is not None else 0

    def _load(self) -> bool:
        data = self._partial + self._handle.read(_INDEX_BATCH * INDEX_ENTRY.size)
        whole = len(data) - len(data) % INDEX_ENTRY.size
        self._partial = data[whole:]
        self._entries.extend(INDEX_ENTRY.iter_unpack(data[:whole]))
        return whole > 0


class FileLogStream:
    """A `LogStream` over the log file; `close()` from any thread wakes a pending read."""

    def __init__(
        self,
        handle: BinaryIO,
        options: base.LogOptions,
        *,
        start: int,
        finished: Callable[[], bool],
        index: BinaryIO | None = None,
    ) -> None:
        """`start` is where reading begins: a line's start, or the end for an attachment.
        `index` is needed for `timestamps` and `since`."""
        self._handle: BinaryIO | None = handle
        self._index_handle = index
        self._options = options
        self._finished = finished
        self._since = stamp.ns_from_datetime(options.since) if options.since else None
        self._plain = self._since is None and not options.timestamps
        self._stamps: StampIndex | None = None
        if not self._plain:
            if index is None:
                raise ValueError("timestamps and since need the log's index")
            self._stamps = StampIndex(index)
            self._stamps.seek(start)
        self._remaining = options.limit_bytes
        self._position = start
        self._at_line_start = True
        self._skipping = False  # inside a line that `since` leaves out
        self._last_stamp: tuple[int, bytes] = (-1, b"")
        self._out: deque[bytes] = deque()  # output not yet read, in the blocks it was made in
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # Without `follow`, the log as it is now: output written while the answer is being
        # read is not part of it (else `tail_lines=2` on a busy workload could give 3).
        self._end = None if options.follow else handle.seek(0, os.SEEK_END)
        handle.seek(start)

    def read(self, max_bytes: int = 65536) -> bytes:
        """Block (polling every POLL_SECONDS while following) until `read_nowait` has an answer."""
        while (data := self.read_nowait(max_bytes)) is None:
            self._closed.wait(POLL_SECONDS)
        return data

    def read_nowait(self, max_bytes: int = 65536) -> bytes | None:
        """`PolledLogStream`: output, b"" at the end (or once closed), None for nothing new yet."""
        try:
            return self._step(max(1, max_bytes))
        except OSError as exc:
            self.close()
            raise Unavailable(f"cannot read the log: {exc.strerror or type(exc).__name__}") from exc

    def _step(self, max_bytes: int) -> bytes | None:
        if self._closed.is_set():
            return b""
        with self._lock:
            while True:
                if self._handle is None:
                    return b""
                if self._out:
                    return self._take(max_bytes)
                if self._remaining == 0:
                    self._release()
                    return b""
                if self._fill():
                    continue
                # Nothing new: is that the end? (Asked only now, not per block of backlog,
                # and read once more after a yes: output written just before it counts.)
                if not self._options.follow or self._finished():
                    if self._fill():
                        continue
                    self._release()
                    return b""
                return None

    def _take(self, max_bytes: int) -> bytes:
        """Up to `max_bytes` of output: whole blocks as they are (no copy) when they fit."""
        chunk = self._out.popleft()
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            self._out.appendleft(rest)
            return chunk
        taken = [chunk]
        size = len(chunk)
        while self._out and size + len(self._out[0]) <= max_bytes:
            taken.append(self._out.popleft())
            size += len(taken[-1])
        return taken[0] if len(taken) == 1 else b"".join(taken)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._release()

    def _release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._index_handle is not None:
            self._index_handle.close()
            self._index_handle = None

    def _fill(self) -> bool:
        """Turn newly written output into what the reader asked for; True if any was read."""
        assert self._handle is not None
        size = _READ_BLOCK if self._end is None else min(_READ_BLOCK, self._end - self._position)
        data = self._handle.read(size) if size > 0 else b""
        if not data:
            return False
        self._append(data if self._plain else self._by_line(data))
        self._position += len(data)
        return True

    def _by_line(self, data: bytes) -> bytes:
        """`data` (read at `_position`) with each line stamped and/or filtered by `since`."""
        assert self._stamps is not None
        out: list[bytes] = []
        position = self._position
        pieces = data.split(b"\n")
        last = len(pieces) - 1
        for number, piece in enumerate(pieces):
            ended = number < last
            size = len(piece) + ended
            if size == 0:
                continue  # the empty tail after a final newline
            if self._at_line_start:
                arrived = self._stamps.ns_at(position)
                self._skipping = self._since is not None and arrived < self._since
                if self._options.timestamps and not self._skipping:
                    out.append(self._stamp(arrived))
            if not self._skipping:
                out.append(piece + b"\n" if ended else piece)
            position += size
            self._at_line_start = ended
        return b"".join(out)

    def _stamp(self, arrived: int) -> bytes:
        """The kubelet's line prefix; lines of one chunk share it, so it is made once."""
        if self._last_stamp[0] != arrived:
            self._last_stamp = (arrived, stamp.stamp_from_ns(arrived).encode("ascii") + b" ")
        return self._last_stamp[1]

    def _append(self, out: bytes) -> None:
        if self._remaining is not None:
            out = out[: self._remaining]
            self._remaining -= len(out)
        if out:
            self._out.append(out)
