"""The local provider's exec: pipes kept apart, stdin round-trips, a real PTY with resize."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest

from providers.base import ClaimName, InstanceId, InstanceState, PodSpec, Process, ProvisionRequest
from providers.errors import NotFound
from providers.local import LocalProvider
from tests.support.polling import wait_for

CLAIM = "ns-pod-abcdefghij"
SECRET = "exec-s3cr3t"


@pytest.fixture
def running(provider: LocalProvider) -> InstanceId:
    pod = PodSpec("ns", "pod", "uid", "main", "busybox", args=("exec sleep 300",))
    instance_id = provider.provision(pod, ProvisionRequest(ClaimName(CLAIM), env={"TOKEN": SECRET})).instance_id
    wait_for(lambda: provider.get(instance_id).state is InstanceState.RUNNING)  # type: ignore[union-attr]
    return instance_id


@pytest.fixture
def started(provider: LocalProvider, running: InstanceId) -> Iterator[Callable[..., Process]]:
    processes: list[Process] = []

    def start(command: list[str], *, tty: bool = False, stdin: bool = True) -> Process:
        process = provider.exec(running, command, tty=tty, stdin=stdin)
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.close()


def drain(read: Callable[[], bytes]) -> bytes:
    chunks = []
    while chunk := read():
        chunks.append(chunk)
    return b"".join(chunks)


def test_stdout_and_stderr_are_kept_apart_and_the_exit_code_returned(started: Callable[..., Process]) -> None:
    process = started(["sh", "-c", "echo out; echo err >&2; exit 3"], stdin=False)
    assert drain(process.read_stdout) == b"out\n"
    assert drain(process.read_stderr) == b"err\n"
    assert process.wait(timeout=30) == 3


def test_a_megabyte_round_trips_through_cat_byte_exact(started: Callable[..., Process]) -> None:
    payload = os.urandom(1024 * 1024)
    process = started(["cat"])
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(drain(process.read_stdout)))
    reader.start()
    for start in range(0, len(payload), 100_000):
        process.write_stdin(payload[start : start + 100_000])
    process.close_stdin()
    reader.join(timeout=60)
    assert out == [payload] and process.wait(timeout=30) == 0


def test_busy_stdout_and_stderr_do_not_deadlock(started: Callable[..., Process]) -> None:
    """The caller reads stdout to the end first while the command also fills stderr."""
    script = "head -c 2000000 /dev/zero; head -c 2000000 /dev/zero >&2; head -c 10 /dev/zero"
    process = started(["sh", "-c", script], stdin=False)
    assert len(drain(process.read_stdout)) == 2_000_010
    assert len(drain(process.read_stderr)) == 2_000_000


def test_runs_in_the_instance_folder_with_its_env(
    provider: LocalProvider, running: InstanceId, started: Callable[..., Process]
) -> None:
    process = started(["sh", "-c", 'printf "%s|%s" "$PWD" "$TOKEN"'], stdin=False)
    assert drain(process.read_stdout) == f"{provider.root / CLAIM}|{SECRET}".encode()


def test_death_by_signal_is_reported_like_a_shell(started: Callable[..., Process]) -> None:
    process = started(["sh", "-c", "kill -TERM $$"], stdin=False)
    assert process.wait(timeout=30) == 143


def test_wait_times_out_and_close_kills_idempotently(started: Callable[..., Process]) -> None:
    process = started(["sleep", "300"], stdin=False)
    assert process.wait(timeout=0.1) is None
    process.close()
    process.close()
    assert process.wait(timeout=5) == 128 + signal.SIGKILL


def test_tty_resize_is_seen_by_stty_size(started: Callable[..., Process]) -> None:
    process = started(["sh", "-c", "read go; stty size"], tty=True)
    process.resize(cols=123, rows=45)
    process.write_stdin(b"go\n")
    assert b"45 123" in drain(process.read_stdout)
    assert process.read_stderr() == b""
    assert process.wait(timeout=30) == 0


def test_tty_is_the_controlling_terminal(started: Callable[..., Process]) -> None:
    process = started(["sh", "-c", "test -t 0 && test -t 1 && tty && exec 3</dev/tty"], tty=True, stdin=False)
    output = drain(process.read_stdout)
    assert process.wait(timeout=30) == 0, output
    assert b"/dev/pts/" in output


@pytest.mark.parametrize("typed", [b"hello\n", b"partial"])
def test_tty_close_stdin_gives_eof(started: Callable[..., Process], typed: bytes) -> None:
    process = started(["cat"], tty=True)
    process.write_stdin(typed)
    process.close_stdin()
    assert process.wait(timeout=30) == 0
    assert typed.strip() in drain(process.read_stdout)


def test_exec_needs_a_running_instance(provider: LocalProvider) -> None:
    with pytest.raises(NotFound):
        provider.exec(InstanceId("local-nothing-here"), ["true"], tty=False, stdin=False)
    pod = PodSpec("ns", "pod", "uid", "main", "busybox", args=("true",))
    instance_id = provider.provision(pod, ProvisionRequest(ClaimName(CLAIM))).instance_id
    wait_for(lambda: provider.get(instance_id).state is InstanceState.SUCCEEDED)  # type: ignore[union-attr]
    with pytest.raises(NotFound, match="not running"):
        provider.exec(instance_id, ["true"], tty=False, stdin=False)


def test_a_missing_command_is_not_found(provider: LocalProvider, running: InstanceId) -> None:
    with pytest.raises(NotFound):
        provider.exec(running, ["/nonexistent/tool"], tty=False, stdin=False)


@pytest.mark.parametrize("tty", [False, True])
def test_an_exec_reads_its_output_when_the_manager_holds_over_1024_descriptors(tty: bool) -> None:
    """select() refuses a descriptor numbered 1024 or more; a manager with many Pods, streams and
    clients open gets such numbers, and the exec's pumps must still read (they poll)."""
    from providers.local.process import start_process

    held = [os.dup(0) for _ in range(1100)]  # the next descriptors opened are numbered past 1024
    try:
        process = start_process(["sh", "-c", "echo out; echo err >&2"], cwd="/", env={}, tty=tty, stdin=False)
        try:
            assert process.wait(10) == 0
            out = b""
            while chunk := process.read_stdout(65536):
                out += chunk
            assert b"out" in out
        finally:
            process.close()
    finally:
        for fd in held:
            os.close(fd)


def test_I7_output_nobody_reads_is_buffered_up_to_the_bound_and_the_command_waits() -> None:
    """A command writing 16 MiB that nobody reads: the pump holds MAX_BUFFER (plus one read)
    and stops reading, so the pipe fills and the command blocks; read, every byte arrives."""
    from providers.local import process as local_process

    size = 16 * 1024 * 1024
    process = local_process.start_process(
        ["head", "-c", str(size), "/dev/zero"], cwd="/", env={}, tty=False, stdin=False
    )
    try:
        pump = process._stdout  # type: ignore[attr-defined]
        wait_for(lambda: len(pump._buffer) >= local_process.MAX_BUFFER, 30, 0.05, what="the buffer full")
        assert process.wait(0.5) is None  # the command waits on its full pipe
        assert len(pump._buffer) <= local_process.MAX_BUFFER + 65536
        total = 0
        while chunk := process.read_stdout(65536):
            total += len(chunk)
        assert total == size and process.wait(10) == 0
    finally:
        process.close()
