"""Scripted `exec` inside a fake instance: a tiny command interpreter behind `Process`,
and the `FinishedProcess` an exec over HTTP answers with.

Built by the cloud's `exec`; read by the kubelet edge like any `Process`. Knows `echo`,
`cat`, `test -e|-f`, `ls`, `true`, `false`, `sh -c 'exit N'`, `stty size`, and the
scenario's canned commands; files are the container's (its volume files and those a
control call put there), known by path only: `cat` of one prints nothing. Everything
else is "command not found" (127). It never runs a real program.
Tests: tests/providers/fake/test_fake_console.py.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from providers.fake.scenario import CannedCommand

DEFAULT_SIZE = (24, 80)  # rows, cols: what a terminal reports before any resize
EOT = b"\x04"  # Ctrl-D: a terminal turns it into end of input


class ScriptedProcess:
    """A `Process` whose program is scripted. The program starts on first use (a read,
    a write, `wait`), so a resize sent right after `exec` is already seen by `stty size`."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        tty: bool,
        stdin: bool,
        canned: Mapping[str, CannedCommand] | None = None,
        files: frozenset[str] = frozenset(),
        resize_wait: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._argv = list(command)
        self._tty = tty
        self._stdin_open = stdin
        self._canned = canned or {}
        self._files = files
        self._resize_wait = resize_wait
        self._clock = clock
        self._cond = threading.Condition()
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._exit: int | None = None
        self._size: tuple[int, int] | None = None
        self._program: _Program | None = None
        self._closed = False

    # -- the Process protocol -------------------------------------------------------
    def write_stdin(self, data: bytes) -> None:
        with self._cond:
            program = self._started()
            if not self._stdin_open or self._exit is not None:
                return
            if self._tty and EOT in data:
                data = data.split(EOT, 1)[0]
                program.stdin(self, data)
                self._eof(program)
            else:
                program.stdin(self, data)
            self._cond.notify_all()

    def close_stdin(self) -> None:
        with self._cond:
            self._eof(self._started())
            self._cond.notify_all()

    def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return self._read(self._stdout, max_bytes)

    def read_stderr(self, max_bytes: int = 65536) -> bytes:
        if self._tty:
            return b""
        return self._read(self._stderr, max_bytes)

    def resize(self, cols: int, rows: int) -> None:
        with self._cond:
            if self._tty:
                self._size = (rows, cols)
                if self._program is not None:
                    self._program.resized(self)
                self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> int | None:
        with self._cond:
            self._started()
            deadline = None if timeout is None else self._clock() + timeout
            while True:
                remaining = self._pause(deadline)
                if self._exit is not None or (remaining is not None and remaining <= 0):
                    return self._exit
                self._cond.wait(remaining)

    def close(self) -> None:
        with self._cond:
            if self._exit is None:
                self._exit = 137  # killed, as a shell reports SIGKILL
            self._closed = True
            self._cond.notify_all()

    # -- what programs call, with the lock held -------------------------------------
    def emit(self, stdout: str = "", stderr: str = "") -> None:
        self._stdout += stdout.encode()
        (self._stdout if self._tty else self._stderr).extend(stderr.encode())

    def emit_bytes(self, data: bytes) -> None:
        self._stdout += data

    def exit(self, code: int) -> None:
        if self._exit is None:
            self._exit = code & 0xFF

    @property
    def tty(self) -> bool:
        return self._tty

    @property
    def size(self) -> tuple[int, int] | None:
        return self._size

    # -- internals ------------------------------------------------------------------
    def _started(self) -> _Program:
        if self._program is None:
            self._program = resolve(self._argv, self._canned, self._files)
            self._program.start(self, self._clock() + self._resize_wait)
            if not self._stdin_open:
                self._program.eof(self)
        return self._program

    def _eof(self, program: _Program) -> None:
        if self._stdin_open:
            self._stdin_open = False
            program.eof(self)

    def _pause(self, deadline: float | None) -> float | None:
        """Let a program waiting on time act; the seconds to wait next (None: forever)."""
        now = self._clock()
        assert self._program is not None
        wake = self._program.poll(self, now)
        remaining = None if deadline is None else deadline - now
        if wake is not None:
            remaining = wake - now if remaining is None else min(remaining, wake - now)
        return remaining

    def _read(self, buffer: bytearray, max_bytes: int) -> bytes:
        with self._cond:
            self._started()
            while True:
                remaining = self._pause(None)
                if buffer:
                    chunk = bytes(buffer[:max_bytes])
                    del buffer[:max_bytes]
                    return chunk
                if self._exit is not None or self._closed:
                    return b""
                self._cond.wait(remaining)


class _Program:
    """A scripted program: reacts to start, stdin, EOF, resize and the passing of time."""

    def start(self, proc: ScriptedProcess, resize_deadline: float) -> None: ...

    def stdin(self, proc: ScriptedProcess, data: bytes) -> None: ...

    def eof(self, proc: ScriptedProcess) -> None: ...

    def resized(self, proc: ScriptedProcess) -> None: ...

    def poll(self, proc: ScriptedProcess, now: float) -> float | None:
        return None


class _Output(_Program):
    def __init__(self, stdout: str = "", stderr: str = "", code: int = 0) -> None:
        self._out, self._err, self._code = stdout, stderr, code

    def start(self, proc: ScriptedProcess, resize_deadline: float) -> None:
        proc.emit(self._out, self._err)
        proc.exit(self._code)


class _Cat(_Program):
    def stdin(self, proc: ScriptedProcess, data: bytes) -> None:
        proc.emit_bytes(data)

    def eof(self, proc: ScriptedProcess) -> None:
        proc.exit(0)


class _SttySize(_Program):
    """Prints "rows cols". A client sends its first resize just after the exec starts,
    so with a TTY and no size yet it waits a moment before reporting the default."""

    def __init__(self) -> None:
        self._deadline: float | None = None

    def start(self, proc: ScriptedProcess, resize_deadline: float) -> None:
        if not proc.tty:
            proc.emit(stderr="stty: 'standard input': Inappropriate ioctl for device\n")
            proc.exit(1)
        elif proc.size is not None:
            self._report(proc)
        else:
            self._deadline = resize_deadline

    def resized(self, proc: ScriptedProcess) -> None:
        if self._deadline is not None:
            self._report(proc)

    def poll(self, proc: ScriptedProcess, now: float) -> float | None:
        if self._deadline is None:
            return None
        if now >= self._deadline:
            self._report(proc)
            return None
        return self._deadline

    def _report(self, proc: ScriptedProcess) -> None:
        self._deadline = None
        rows, cols = proc.size or DEFAULT_SIZE
        proc.emit(f"{rows} {cols}\n")
        proc.exit(0)


def resolve(argv: Sequence[str], canned: Mapping[str, CannedCommand], files: frozenset[str] = frozenset()) -> _Program:
    """The scripted program for `argv`, in a container that has `files`."""
    if not argv:
        return _Output(stderr="fake: command not found\n", code=127)
    name, args = os.path.basename(argv[0]), list(argv[1:])
    if name in canned:
        spec = canned[name]
        return _Output(spec.stdout, spec.stderr, spec.exit_code)
    if name in ("sh", "bash") and len(args) >= 2 and args[0] == "-c":
        return _shell(args[1], canned, files)
    if name == "echo":
        newline = not (args and args[0] == "-n")
        return _Output(" ".join(args if newline else args[1:]) + ("\n" if newline else ""))
    if name in ("true", "false"):
        return _Output(code=0 if name == "true" else 1)
    if name == "cat" and not args:
        return _Cat()
    missing = next((a for a in args if a not in files), None)
    if name in ("cat", "ls") and missing is not None:
        return _Output(stderr=f"{name}: {missing}: No such file or directory\n", code=1)
    if name == "cat":
        return _Output()  # contents are not kept
    if name == "ls" and args:
        return _Output("".join(f"{a}\n" for a in args))
    if name == "test" and len(args) == 2 and args[0] in ("-e", "-f"):
        return _Output(code=0 if args[1] in files else 1)
    if name == "stty" and args == ["size"]:
        return _SttySize()
    if name == "stty":
        return _Output()
    return _Output(stderr=f"fake: command not found: {name}\n", code=127)


def _shell(script: str, canned: Mapping[str, CannedCommand], files: frozenset[str]) -> _Program:
    """`sh -c SCRIPT` for one simple command; `exit N` sets the exit code."""
    try:
        words = shlex.split(script)
    except ValueError as exc:
        return _Output(stderr=f"sh: syntax error: {exc}\n", code=2)
    if not words:
        return _Output()
    if words[0] == "exit":
        try:
            return _Output(code=int(words[1]) if len(words) > 1 else 0)
        except ValueError:
            return _Output(stderr=f"sh: exit: Illegal number: {words[1]}\n", code=2)
    return resolve(words, canned, files)


def run_to_end(process: ScriptedProcess, *, timeout: float = 5.0) -> FinishedProcess:
    """Run a command that reads no stdin to its end (an exec over HTTP); one still running
    after `timeout` seconds is killed (137)."""
    code = process.wait(timeout)
    process.close()
    stdout, stderr = process.read_stdout(1 << 20), process.read_stderr(1 << 20)
    return FinishedProcess(stdout, stderr, 137 if code is None else code)


class FinishedProcess:
    """A `Process` that already ran: its output is read back, stdin is closed, it waited."""

    def __init__(self, stdout: bytes, stderr: bytes, exit_code: int) -> None:
        self._stdout, self._stderr, self._exit = bytearray(stdout), bytearray(stderr), exit_code
        self._lock = threading.Lock()

    @property
    def exit_code(self) -> int:
        return self._exit

    def write_stdin(self, data: bytes) -> None:
        return None  # it read no stdin

    def close_stdin(self) -> None:
        return None

    def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return self._take(self._stdout, max_bytes)

    def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return self._take(self._stderr, max_bytes)

    def resize(self, cols: int, rows: int) -> None:
        return None

    def wait(self, timeout: float | None = None) -> int | None:
        return self._exit

    def close(self) -> None:
        return None

    def _take(self, buffer: bytearray, max_bytes: int) -> bytes:
        with self._lock:
            chunk = bytes(buffer[:max_bytes])
            del buffer[:max_bytes]
            return chunk
