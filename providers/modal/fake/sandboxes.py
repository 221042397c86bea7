"""Test infrastructure: the fake Modal's sandboxes as real local processes.

Each sandbox is a `subprocess.Popen` with `start_new_session=True` in its own temporary
folder (its execs run in the same folder); reader threads record every chunk of stdout/stderr with its arrival time, a
waiter thread records the exit code, a timer ends the process group at the sandbox's timeout.
A sandbox's process group is its container: when its command ends, whatever else of it
still runs is killed (as a container's processes die with it), then `on_end` runs (the
state ends the sandbox's execs). A signal's death is recorded as the negative signal
number (Popen's), which the control plane and the router report as Modal does.
Env values live only in the process; records keep env KEYS only.
Tests: tests/providers/modal/test_modal_fake_lifecycle.py
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

STDOUT = 1
STDERR = 2


@dataclass
class Output:
    """Chunks in arrival order: (arrival time, fd, data); `closed` once both pipes ended."""

    chunks: list[tuple[float, int, bytes]] = field(default_factory=list)
    open_pipes: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    def add(self, fd: int, data: bytes) -> None:
        with self.cond:
            self.chunks.append((time.time(), fd, data))
            self.cond.notify_all()

    def close_one(self) -> None:
        with self.cond:
            self.open_pipes -= 1
            self.cond.notify_all()

    @property
    def closed(self) -> bool:
        return self.open_pipes <= 0


class Process:
    """One real child process with captured output and a recorded end ("exited", "terminated",
    "timeout", "killed")."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        *,
        timeout: float | None,
        pty: bool = False,
        cwd: str | None = None,
        size: tuple[int, int] | None = None,
        container: bool = False,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        """`size` (rows, columns) is the PTY's window size when the command starts;
        `container`: the sandbox's own command (its group dies with it); `on_end` runs once
        it ended."""
        self._container = container
        self._on_end = on_end
        self._owns_dir = cwd is None
        self.workdir = cwd or tempfile.mkdtemp(prefix="fake-modal-")
        self.output = Output()
        self.exit_code: int | None = None
        self.ended_how = ""
        self.done = threading.Event()
        self._forced: tuple[str, int] | None = None
        self._lock = threading.Lock()
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.workdir, **env}
        self._master: int | None = None
        self._pty = pty
        if pty:
            import pty as ptymod

            master, slave = ptymod.openpty()
            self._master = master
            if size is not None and all(size):
                _set_size(master, *size)
            self.popen = subprocess.Popen(
                argv, cwd=self.workdir, env=full_env, start_new_session=True, stdin=slave, stdout=slave, stderr=slave
            )
            os.close(slave)
            self.output.open_pipes = 1
            threading.Thread(target=self._read_fd, args=(master, STDOUT), daemon=True).start()
        else:
            self.popen = subprocess.Popen(
                argv,
                cwd=self.workdir,
                env=full_env,
                start_new_session=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            self.output.open_pipes = 2
            assert self.popen.stdout is not None and self.popen.stderr is not None
            for pipe, fd in ((self.popen.stdout, STDOUT), (self.popen.stderr, STDERR)):
                threading.Thread(target=self._read_pipe, args=(pipe, fd), daemon=True).start()
        self.pid = self.popen.pid
        threading.Thread(target=self._wait, daemon=True).start()
        if timeout:
            timer = threading.Timer(timeout, self.end, args=("timeout", -1))
            timer.daemon = True
            timer.start()

    def _read_pipe(self, pipe: IO[bytes], fd: int) -> None:
        try:
            while data := pipe.read1(65536):  # type: ignore[attr-defined]
                self.output.add(fd, data)
        finally:
            pipe.close()
            self.output.close_one()

    def _read_fd(self, master: int, fd: int) -> None:
        try:
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.output.add(fd, data)
        finally:
            with self._lock:  # no write or resize may reach the number once it is reused
                self._master = None
                os.close(master)
            self.output.close_one()

    def _wait(self) -> None:
        if self._container:
            # Ended but not reaped: its pid, the group's id, is no other process's yet.
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        code = self.popen.wait()
        if self.popen.stdin is not None:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        with self._lock:
            how, forced_code = self._forced or ("exited", code)
            self.exit_code = forced_code if self._forced else code
            self.ended_how = how
        self.done.set()
        if self._on_end is not None:
            self._on_end()
        if self._owns_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def end(self, how: str, code: int) -> None:
        """End the process group, recording `how` and `code` (unless it already ended)."""
        with self._lock:
            if self.done.is_set() or self._forced:
                return
            self._forced = (how, code)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def write_stdin(self, data: bytes, eof: bool) -> None:
        if self._pty:
            with self._lock:  # a duplicate, so the write never blocks the lock or hits a reused number
                if self._master is None or self.done.is_set():
                    return
                master = os.dup(self._master)
            try:
                if data:
                    os.write(master, data)
                if eof:
                    os.write(master, b"\x04")
            except OSError:
                pass
            finally:
                os.close(master)
            return
        stdin = self.popen.stdin
        if stdin is None or stdin.closed:
            return
        try:
            if data:
                stdin.write(data)
                stdin.flush()
            if eof:
                stdin.close()
        except (BrokenPipeError, ValueError):
            pass

    def resize(self, rows: int, cols: int) -> None:
        with self._lock:
            if self._master is not None and rows and cols:
                _set_size(self._master, rows, cols)


def _set_size(master: int, rows: int, cols: int) -> None:
    import fcntl
    import struct
    import termios

    try:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    except OSError:  # the terminal is gone: the command has ended
        pass
