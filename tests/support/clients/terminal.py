"""`kubectl exec -it` under a real pseudo-terminal: the size the remote shell sees, and a resize."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager


@contextmanager
def on_a_terminal(
    argv: Sequence[str], env: Mapping[str, str], *, rows: int = 24, cols: int = 80
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`argv` running on a new pseudo-terminal (24x80 unless told): the master end and the
    process; on exit a process still running is killed and the master is closed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    session = subprocess.Popen(
        list(argv), stdin=slave, stdout=slave, stderr=slave, env=dict(env), start_new_session=True
    )
    os.close(slave)
    try:
        yield master, session
    finally:
        if session.poll() is None:
            session.kill()
            session.wait(timeout=30)
        os.close(master)


def check_exec_tty_resize(argv: Sequence[str], env: Mapping[str, str], *, rows: int = 24, cols: int = 80) -> None:
    """Run `argv` (a `kubectl exec -it ... -- sh`) on a `rows`x`cols` terminal: `stty size`
    must say so, then say 40 120 after the terminal is resized; `exit` ends it with 0."""
    with on_a_terminal(argv, env, rows=rows, cols=cols) as (master, session):
        first = f"{rows} {cols}".encode()
        assert first in type_until(master, b"stty size\r", first, retry=True)
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        session.send_signal(signal.SIGWINCH)  # kubectl watches SIGWINCH and sends the new size
        assert b"40 120" in type_until(master, b"stty size\r", b"40 120", retry=True)
        os.write(master, b"exit 0\r")
        assert session.wait(timeout=30) == 0


def type_until(master: int, keys: bytes, expected: bytes, *, retry: bool = False, timeout: float = 30) -> bytes:
    """Type `keys` and read until `expected` shows (typing again on `retry`: the resize and
    the shell's prompt reach the terminal asynchronously)."""
    os.write(master, keys)
    seen, deadline, last = b"", time.monotonic() + timeout, time.monotonic()
    while expected not in seen and time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
        elif retry and time.monotonic() - last > 1.0:
            os.write(master, keys)
            last = time.monotonic()
    return seen
