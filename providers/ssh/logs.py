"""`FileLog` and `open_log_stream`: the seam's `LogStream` for a workload log file on a VM.

Called by VM providers' `logs`. The remote side is a short POSIX shell script (`tail`,
with `-F` to follow) that stops when the workload's exit marker appears or our session
goes away; stamps (`<RFC 3339> <line>`, as `docker logs --timestamps` writes them) are
kept, stripped or used for `since` here, at the client. Never runs anything but tail.
Tests: tests/providers/ssh/test_ssh.py.
"""

from __future__ import annotations

import shlex
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from providers import base
from providers.errors import NotSupported
from providers.ssh.loop import LoopThread
from providers.ssh.process import SshProcess, start_process
from providers.ssh.target import SshTarget

POLL_SECONDS = 0.2  # how often the remote script looks for the exit marker


@dataclass(frozen=True)
class FileLog:
    """Where the workload's output is on the instance. `done_path` appears when the
    workload has exited (None: never, so `follow` lasts until closed); `stamped`: every
    line starts with an RFC 3339 time and a space."""

    path: str
    done_path: str | None = None
    stamped: bool = False


def remote_command(log: FileLog, options: base.LogOptions) -> str:
    """The shell script run on the instance (pure; tested as text)."""
    start = "+1" if options.tail_lines is None else str(max(0, options.tail_lines))
    path = shlex.quote(log.path)
    if not options.follow:
        return f"[ -r {path} ] && exec tail -n {start} -- {path}; exit 0"
    done = f"[ ! -e {shlex.quote(log.done_path)} ] && " if log.done_path else ""
    # $PPID is the sshd session: when our connection goes, the loop ends and tail with it.
    return (
        f"tail -s {POLL_SECONDS} -n {start} -F -- {path} 2>/dev/null & T=$!; "
        f'while {done}kill -0 "$PPID" 2>/dev/null; do sleep {POLL_SECONDS}; done; '
        f'sleep {POLL_SECONDS * 3}; kill "$T" 2>/dev/null; wait "$T" 2>/dev/null; exit 0'
    )


def parse_stamp(text: bytes) -> datetime | None:
    """The datetime of an RFC 3339 stamp (nanoseconds allowed), or None."""
    try:
        when = datetime.fromisoformat(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class SshLogStream:
    """A `LogStream` over a remote tail; honours timestamps, since and limit_bytes."""

    def __init__(self, process: SshProcess, log: FileLog, options: base.LogOptions) -> None:
        self._process = process
        self._stamped = log.stamped
        self._options = options
        self._remaining = options.limit_bytes
        self._partial = b""
        self._out = bytearray()
        self._done = False
        self._lock = threading.Lock()

    def read(self, max_bytes: int = 65536) -> bytes:
        with self._lock:
            while not self._out and not self._done:
                data = self._process.read_stdout(65536)
                self._take(data)
            chunk = bytes(self._out[: max(1, max_bytes)])
            del self._out[: len(chunk)]
            if self._done and not self._out:
                self._process.close()
            return chunk

    def close(self) -> None:
        self._process.close()

    def _take(self, data: bytes) -> None:
        if not data:
            self._done = True
            if self._partial:
                self._emit(self._partial)
                self._partial = b""
            return
        if not self._stamped or (self._options.timestamps and self._options.since is None):
            self._append(data)
            return
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self._emit(line + b"\n")

    def _emit(self, line: bytes) -> None:
        if not self._stamped:
            self._append(line)
            return
        stamp, _, rest = line.partition(b" ")
        when = parse_stamp(stamp)
        since = self._options.since
        if since is not None and when is not None and when < since:
            return
        self._append(line if self._options.timestamps or when is None else rest)

    def _append(self, data: bytes) -> None:
        if self._remaining is not None:
            data = data[: self._remaining]
            self._remaining -= len(data)
            if self._remaining == 0:
                self._done = True
        self._out += data


def open_log_stream(
    target: SshTarget, log: FileLog, options: base.LogOptions, *, loop: LoopThread | None = None
) -> SshLogStream:
    """Start tailing `log` on `target`. NotSupported for options an unstamped log cannot
    honour; Unavailable when the host cannot be reached."""
    if options.previous:
        raise NotSupported("a VM runs its workload once: there is no previous log")
    if not log.stamped and (options.timestamps or options.since is not None):
        raise NotSupported("this workload's log carries no timestamps: timestamps and since are not available")
    if options.since is not None and options.since.tzinfo is None:
        options = replace(options, since=options.since.replace(tzinfo=UTC))
    if options.limit_bytes == 0:
        options = base.LogOptions(follow=False, tail_lines=0)
    process = start_process(target, remote_command(log, options), tty=False, stdin=False, loop=loop)
    return SshLogStream(process, log, options)
