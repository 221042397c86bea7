"""Read an instance's stamped log file as the kubelet would serve it.

Called by `LocalProvider.logs`. Options are honoured here, at the source: the stamp is
kept or stripped, `since` skips older records, `tail_lines` seeks backwards in blocks
(never reading the whole file), `limit_bytes` cuts the output, `follow` polls for new
records until the workload exited and the file is drained. Record format: see
`supervisor.LineRecorder`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import BinaryIO

from providers.base import LogOptions
from providers.errors import Unavailable
from providers.local import stamp

POLL_SECONDS = 0.05
_READ_BLOCK = 256 * 1024
_SEP = stamp.STAMP_LENGTH  # index of the separator: b" " (line end) or b"P" (piece)
_PIECE_MARK = b"ZP"  # the end of a stamp followed by the piece separator


def _line_ends(records: list[bytes]) -> list[bool]:
    """Which records end an output line: a complete line, or the very last record."""
    return [rec[_SEP : _SEP + 1] != b"P" or i == len(records) - 1 for i, rec in enumerate(records)]


def tail_offset(handle: BinaryIO, lines: int) -> int:
    """The file offset where the last `lines` output lines begin, reading backwards in
    growing blocks, so a big file is not read in full."""
    size = handle.seek(0, 2)
    block = _READ_BLOCK
    while True:
        pos = max(0, size - block)
        handle.seek(pos)
        data = handle.read(size - pos)
        complete_end = data.rfind(b"\n") + 1  # a record being written is not counted
        first = 0 if pos == 0 else data.find(b"\n") + 1  # the first record may be cut
        if lines <= 0 and (complete_end or pos == 0):
            return pos + complete_end
        if lines > 0 and (0 < first <= complete_end or pos == 0):
            records = data[first:complete_end].split(b"\n")[:-1]
            ends = _line_ends(records)
            if sum(ends) > lines or pos == 0:
                offset, seen = complete_end, 0
                for record, is_end in zip(reversed(records), reversed(ends), strict=True):
                    if is_end:
                        seen += 1
                        if seen > lines:
                            return pos + offset
                    offset -= len(record) + 1
                return pos + first if pos else 0
        block *= 2


class FileLogStream:
    """A `LogStream` over the log file; `close()` from any thread wakes a pending read."""

    def __init__(self, handle: BinaryIO, options: LogOptions, *, start: int, finished: Callable[[], bool]) -> None:
        self._handle: BinaryIO | None = handle
        self._options = options
        self._finished = finished
        self._since = stamp.stamp_from_datetime(options.since).encode("ascii") if options.since else None
        self._remaining = options.limit_bytes
        self._pending = b""  # file bytes of a record not yet complete
        self._out = bytearray()
        self._at_line_start = True
        self._lock = threading.Lock()
        self._closed = threading.Event()
        handle.seek(start)

    def read(self, max_bytes: int = 65536) -> bytes:
        try:
            return self._read(max(1, max_bytes))
        except OSError as exc:
            self.close()
            raise Unavailable(f"cannot read the log: {exc.strerror or type(exc).__name__}") from exc

    def _read(self, max_bytes: int) -> bytes:
        while not self._closed.is_set():
            with self._lock:
                if self._handle is None:
                    return b""
                if self._out:
                    chunk = bytes(self._out[:max_bytes])
                    del self._out[:max_bytes]
                    return chunk
                if self._remaining == 0:
                    self._release()
                    return b""
                done = not self._options.follow or self._finished()
                if self._fill():
                    continue
                if done:
                    self._release()
                    return b""
            self._closed.wait(POLL_SECONDS)
        return b""

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._release()

    def _release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _fill(self) -> bool:
        """Turn newly written complete records into output; True if any were read."""
        assert self._handle is not None
        data = self._handle.read(_READ_BLOCK)
        if not data:
            return False
        data = self._pending + data
        complete = data.rfind(b"\n") + 1
        self._pending = data[complete:]
        block = data[:complete]
        records = block.split(b"\n")[:-1]
        # A piece's stamp ends "ZP"; without one (and with no short record), every record is a
        # whole line, checked in C rather than record by record.
        whole_lines = bool(records) and _PIECE_MARK not in block and min(map(len, records)) > _SEP
        if self._since is None and self._at_line_start and whole_lines:
            # Whole lines only and no `since`: one join for the block instead of a call per line.
            if self._options.timestamps:
                self._append(block)
            else:
                self._append(b"\n".join([r[_SEP + 1 :] for r in records]) + b"\n")
            return True
        for record in records:
            self._emit(record)
        return True

    def _emit(self, record: bytes) -> None:
        if len(record) <= _SEP:
            return  # not a record of ours; nothing to show
        ts, sep, content = record[:_SEP], record[_SEP : _SEP + 1], record[_SEP + 1 :]
        starts_line, self._at_line_start = self._at_line_start, sep != b"P"
        if self._since is not None and ts < self._since:
            return
        out = (ts + b" " if self._options.timestamps and starts_line else b"") + content
        if sep != b"P":
            out += b"\n"
        self._append(out)

    def _append(self, out: bytes) -> None:
        if self._remaining is not None:
            out = out[: self._remaining]
            self._remaining -= len(out)
        self._out += out
