"""`providers.ssh` against a real OpenSSH sshd on loopback: exec (exit codes, stdin EOF,
a PTY and its resize), connection failures, and log tailing (tail, stamps, since, follow)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from providers.base import LogOptions, LogStream
from providers.errors import NotSupported, Unavailable
from providers.ssh import FileLog, SshProcess, open_log_stream, start_process
from providers.ssh.logs import remote_command
from tests.support.servers.sshd import Sshd


def read_all(read: Callable[[int], bytes]) -> bytes:
    out = b""
    while chunk := read(65536):
        out += chunk
    return out


def read_until(read: Callable[[int], bytes], needle: bytes, timeout: float = 20.0) -> bytes:
    """Read on a thread until `needle` shows up (the reads block)."""
    out = bytearray()
    found = threading.Event()

    def pump() -> None:
        while not found.is_set():
            chunk = read(65536)
            if not chunk:
                return
            out.extend(chunk)
            if needle in out:
                found.set()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    found.wait(timeout)
    assert needle in out, f"{needle!r} not in {bytes(out)!r}"
    return bytes(out)


def run(sshd: Sshd, command: list[str], *, tty: bool = False, stdin: bool = False) -> SshProcess:
    return start_process(sshd.target(), command, tty=tty, stdin=stdin)


def test_exec_returns_output_on_separate_streams_and_the_exit_code(sshd: Sshd) -> None:
    process = run(sshd, ["sh", "-c", "echo out; echo err >&2; exit 7"])
    try:
        assert read_all(process.read_stdout) == b"out\n"
        assert read_all(process.read_stderr) == b"err\n"
        assert process.wait(30) == 7
    finally:
        process.close()


def test_a_command_killed_by_a_signal_exits_with_128_plus_the_signal(sshd: Sshd) -> None:
    process = run(sshd, ["sh", "-c", "kill -TERM $$"])
    try:
        assert process.wait(30) == 143
    finally:
        process.close()


def test_stdin_eof_ends_a_command_reading_stdin(sshd: Sshd) -> None:
    process = run(sshd, ["cat"], stdin=True)
    try:
        process.write_stdin(b"hello over ssh\n")
        process.close_stdin()
        assert read_all(process.read_stdout) == b"hello over ssh\n"
        assert process.wait(30) == 0
    finally:
        process.close()


def test_a_pty_sees_its_resize_and_merges_stderr(sshd: Sshd) -> None:
    process = run(sshd, ["sh", "-c", "stty size; read line; stty size; echo oops >&2"], tty=True, stdin=True)
    try:
        read_until(process.read_stdout, b"24 80")
        process.resize(132, 43)
        process.write_stdin(b"go\n")
        read_until(process.read_stdout, b"oops")
        assert process.wait(30) == 0
        assert process.read_stderr() == b""
    finally:
        process.close()


def test_resize_shows_in_stty_size_of_a_later_command(sshd: Sshd) -> None:
    process = run(sshd, ["sh", "-c", "read line; stty size"], tty=True, stdin=True)
    try:
        process.resize(100, 40)
        process.write_stdin(b"\n")
        assert b"40 100" in read_until(process.read_stdout, b"40 100")
    finally:
        process.close()


def test_stdin_eof_through_a_pty_ends_cat(sshd: Sshd) -> None:
    process = run(sshd, ["cat"], tty=True, stdin=True)
    try:
        process.write_stdin(b"typed")
        process.close_stdin()
        assert process.wait(30) == 0
        assert b"typed" in read_all(process.read_stdout)
    finally:
        process.close()


def test_close_ends_a_running_command_and_unblocks_readers(sshd: Sshd) -> None:
    # `cat` on an open stdin runs until the connection goes (a root login gets no signals).
    process = run(sshd, ["cat"], stdin=True)
    results: list[bytes] = []
    reader = threading.Thread(target=lambda: results.append(process.read_stdout()))
    reader.start()
    process.close()
    process.close()
    reader.join(30)
    assert results == [b""]


def test_unreachable_host_wrong_user_key_and_wrong_host_key_are_unavailable(sshd: Sshd, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    cases = [
        sshd.target(port=closed_port),
        sshd.target(private_key=sshd.other_key),
        sshd.target(host_key=sshd.target(private_key=sshd.other_key).private_key and _public_of(sshd.other_key)),
        sshd.target(private_key=b"not a key"),
    ]
    for target in cases:
        with pytest.raises(Unavailable) as caught:
            start_process(target, ["true"], tty=False, stdin=False)
        assert "PRIVATE KEY" not in str(caught.value)


def _public_of(private_key: bytes) -> str:
    import asyncssh

    return asyncssh.import_private_key(private_key).export_public_key().decode().strip()


# -- logs -------------------------------------------------------------------------------

STAMPS = ["2030-01-02T03:04:05.000000001Z", "2030-01-02T03:04:06.000000000Z", "2030-01-02T03:04:07.500000000Z"]


def write_stamped(path: Path, lines: list[str]) -> None:
    with path.open("a") as handle:
        for stamp, line in zip(STAMPS, lines, strict=False):
            handle.write(f"{stamp} {line}\n")


def logs(sshd: Sshd, log: FileLog, **options: object) -> LogStream:
    return open_log_stream(sshd.target(), log, LogOptions(**options))  # type: ignore[arg-type]


def test_logs_strip_stamps_unless_asked_and_honour_tail_since_and_limit(sshd: Sshd, tmp_path: Path) -> None:
    path = sshd.home / f"stamped-{time.monotonic_ns()}.log"
    write_stamped(path, ["one", "two", "three"])
    log = FileLog(str(path), stamped=True)
    assert read_all(logs(sshd, log).read) == b"one\ntwo\nthree\n"
    assert read_all(logs(sshd, log, timestamps=True).read).splitlines()[0] == f"{STAMPS[0]} one".encode()
    assert read_all(logs(sshd, log, tail_lines=1).read) == b"three\n"
    since = datetime(2030, 1, 2, 3, 4, 6, tzinfo=UTC)
    assert read_all(logs(sshd, log, since=since).read) == b"two\nthree\n"
    assert read_all(logs(sshd, log, limit_bytes=6).read) == b"one\ntw"


def test_logs_of_a_missing_file_are_empty_and_unstamped_logs_refuse_timestamps(sshd: Sshd) -> None:
    assert read_all(logs(sshd, FileLog(str(sshd.home / "never-written.log"))).read) == b""
    with pytest.raises(NotSupported):
        logs(sshd, FileLog(str(sshd.home / "plain.log")), timestamps=True)
    with pytest.raises(NotSupported):
        logs(sshd, FileLog(str(sshd.home / "plain.log")), previous=True)


def test_logs_follow_streams_new_lines_and_end_when_the_exit_marker_appears(sshd: Sshd) -> None:
    path = sshd.home / f"follow-{time.monotonic_ns()}.log"
    done = path.with_suffix(".exit")
    path.write_text("")
    stream = logs(sshd, FileLog(str(path), str(done), stamped=True), follow=True)
    try:
        write_stamped(path, ["first"])
        seen = read_until(stream.read, b"first\n")
        with path.open("a") as handle:
            handle.write(f"{STAMPS[1]} second\n")
        seen += read_until(stream.read, b"second\n")
        done.write_text("0\n")
        seen += read_all(stream.read)
        assert seen == b"first\nsecond\n"
    finally:
        stream.close()


def test_closing_a_followed_log_from_another_thread_ends_the_read(sshd: Sshd) -> None:
    path = sshd.home / f"forever-{time.monotonic_ns()}.log"
    path.write_text("line\n")
    stream = logs(sshd, FileLog(str(path)), follow=True)
    assert read_until(stream.read, b"line\n")
    closer = threading.Timer(0.2, stream.close)
    closer.start()
    assert read_all(stream.read) == b""
    closer.join()


def test_remote_command_quotes_paths_and_only_tails() -> None:
    script = remote_command(FileLog("/var/log/it's here.log", "/x/done"), LogOptions(follow=True, tail_lines=5))
    assert "'/var/log/it'\"'\"'s here.log'" in script
    assert script.startswith("tail -s 0.2 -n 5 -F -- ")
    assert remote_command(FileLog("/l"), LogOptions()) == "[ -r /l ] && exec tail -n +1 -- /l; exit 0"
