"""`KeptOutput`: the newest output of one ephemeral container, in chunks of anonymous memory
mapped for it alone, so that dropping a chunk gives its pages back to the system at once.

Owned by a `vnode.ephemeral.streams.Fanout`, always under its lock; the budget
(`vnode.ephemeral.budget`) decides how many chunks it may hold. Never allocates through malloc
(freed 4 MiB bytearrays stayed in RSS), never keeps a chunk it was told to drop.
Tests: tests/vnode/test_ephemeral_budget.py, tests/vnode/test_ephemeral.py.
"""

from __future__ import annotations

import mmap
from collections import deque

CHUNK = 64 * 1024  # bytes per mapped chunk: the granularity of what is kept and dropped


class KeptOutput:
    """A byte log addressed by absolute offsets (bytes since the process started): the kept
    ones run from `start` to `end`; the front is dropped one whole chunk at a time."""

    def __init__(self) -> None:
        self._chunks: deque[mmap.mmap] = deque()
        self.start = 0  # the absolute offset of the first kept byte (the first chunk's first)
        self.end = 0  # the absolute offset after the last byte written
        self.closed = False

    @property
    def held(self) -> int:
        """Bytes of memory mapped for it (whole chunks): what the budget counts."""
        return len(self._chunks) * CHUNK

    @property
    def chunks(self) -> int:
        return len(self._chunks)

    def _room(self) -> int:
        return self.start + self.held - self.end  # the tail chunk's free bytes

    def chunks_for(self, size: int) -> int:
        """How many new chunks appending `size` bytes maps."""
        return max(0, -(-(size - self._room()) // CHUNK))

    def append(self, data: bytes) -> None:
        """Write `data` after the last byte, mapping `chunks_for(len(data))` new chunks."""
        if self.closed:
            return
        view = memoryview(data)
        while view:
            if not self._room():
                self._chunks.append(mmap.mmap(-1, CHUNK))
            at = (self.end - self.start) % CHUNK if self._chunks else 0
            part = view[: CHUNK - at]
            self._chunks[-1][at : at + len(part)] = part
            self.end += len(part)
            view = view[len(part) :]

    def drop_front(self, count: int) -> int:
        """Unmap the first `count` chunks (the tail one only with all of them); bytes freed."""
        count = max(0, min(count, len(self._chunks)))
        for _ in range(count):
            self._chunks.popleft().close()
            self.start = min(self.start + CHUNK, self.end)
        return count * CHUNK

    def close(self) -> int:
        """Unmap everything; later appends and reads find nothing. Bytes freed."""
        freed = self.drop_front(len(self._chunks))
        self.start = self.end
        self.closed = True
        return freed

    def read(self, offset: int, size: int) -> tuple[int, bytes]:
        """Up to `size` bytes from absolute `offset` (a dropped one reads from `start`), and
        the offset they start at; b"" at the end."""
        at = max(offset, self.start)
        out = bytearray()
        while len(out) < size and at < self.end:
            index, within = divmod(at - self.start, CHUNK)
            part = self._chunks[index][within : min(CHUNK, within + size - len(out), within + self.end - at)]
            out += part
            at += len(part)
        return max(offset, self.start), bytes(out)

    def tail_start(self, lines: int) -> int:
        """The absolute offset where the last `lines` kept lines begin: lines end at b"\\n",
        as the kubelet counts them; an unfinished last line counts as one."""
        at = self.end
        if lines <= 0:
            return at
        if at > self.start and self.read(at - 1, 1)[1] == b"\n":
            at -= 1  # the last line's own end
        found = 0
        while at > self.start:
            index, within = divmod(at - 1 - self.start, CHUNK)
            newline = self._chunks[index].rfind(b"\n", 0, within + 1)
            if newline < 0:
                at -= within + 1
                continue
            at = self.start + index * CHUNK + newline
            found += 1
            if found == lines:
                return at + 1
        return self.start
