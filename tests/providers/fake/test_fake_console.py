"""The fake provider's scripted logs and exec, in-process: log options, follow ending at
exit, the cat round trip, exit codes, and `stty size` after a resize."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from providers import errors
from providers.base import ClaimName, InstanceId, LogOptions, LogStream, PodSpec, ProvisionRequest
from providers.fake import FakeProvider
from providers.fake.cloud import FakeCloud
from providers.fake.process import ScriptedProcess
from providers.fake.registry import cloud_named, forget
from providers.fake.scenario import load_scenario
from tests.support.polling import read_to_end


@pytest.fixture
def make() -> Iterator[Any]:
    names: list[str] = []

    def factory(scenario: dict[str, Any] | None = None) -> FakeProvider:
        names.append(f"console-{uuid.uuid4().hex}")
        options: dict[str, Any] = {"cloud": names[-1]}
        if scenario is not None:
            options["scenario"] = scenario
        return FakeProvider("fake", options)

    yield factory
    for name in names:
        forget(name)


def start(provider: FakeProvider) -> InstanceId:
    pod = PodSpec(namespace="ns", name="p", uid=str(uuid.uuid4()), container="c", image="i")
    return provider.provision(pod, ProvisionRequest(claim=ClaimName(f"claim-{uuid.uuid4().hex[:8]}"))).instance_id


def read_all(stream: LogStream | ScriptedProcess, timeout: float = 10.0) -> bytes:
    read = stream.read_stdout if isinstance(stream, ScriptedProcess) else stream.read
    return read_to_end(stream, timeout, read=read)


SCRIPTED = {"log": {"lines": ["hello from {id}", "second", "third {n}"], "interval": 0}}


def test_scripted_lines_come_in_order_with_the_instance_filled_in(make: Any) -> None:
    provider = make(SCRIPTED)
    instance_id = start(provider)
    stream = provider.logs(instance_id, LogOptions())
    assert read_all(stream) == f"hello from {instance_id}\nsecond\nthird 3\n".encode()


def test_tail_limit_and_timestamps_are_honoured(make: Any) -> None:
    provider = make(SCRIPTED)
    instance_id = start(provider)
    assert read_all(provider.logs(instance_id, LogOptions(tail_lines=2))) == b"second\nthird 3\n"
    assert read_all(provider.logs(instance_id, LogOptions(limit_bytes=8))) == b"hello fr"
    stamped = read_all(provider.logs(instance_id, LogOptions(timestamps=True))).decode().splitlines()
    stamp, text = stamped[0].split(" ", 1)
    assert text == f"hello from {instance_id}"
    assert datetime.strptime(stamp[:26] + "Z", "%Y-%m-%dT%H:%M:%S.%fZ").year >= 2024
    assert stamp.endswith("Z") and len(stamp) == len("2024-01-01T00:00:00.000000000Z")


def test_since_skips_lines_printed_before_it() -> None:
    """With an injected clock: lines every second, `since` between the 3rd and the 4th."""
    now = [1_700_000_000.0]
    name = f"since-{uuid.uuid4().hex}"
    cloud_named(name, lambda: FakeCloud(load_scenario({"log": {"interval": 1}}), clock=lambda: now[0]))
    try:
        provider = FakeProvider("fake", {"cloud": name})
        instance_id = start(provider)
        now[0] += 5.5
        since = datetime.fromtimestamp(now[0] - 3.2, UTC)  # line 3 is at +2.0, line 4 at +3.0
        text = read_all(provider.logs(instance_id, LogOptions(since=since))).decode()
        assert text.splitlines() == [f"fake instance {instance_id} line {n}" for n in (4, 5, 6)]
    finally:
        forget(name)


def test_without_follow_the_stream_ends_at_what_was_printed(make: Any) -> None:
    provider = make({"log": {"interval": 0.01}})
    instance_id = start(provider)
    text = read_all(provider.logs(instance_id, LogOptions())).decode()
    assert text.startswith(f"fake instance {instance_id} line 1\n")


def test_follow_streams_new_lines_and_ends_when_the_workload_exits(make: Any) -> None:
    provider = make({"log": {"interval": 0.02}})
    instance_id = start(provider)
    stream = provider.logs(instance_id, LogOptions(follow=True))
    first = stream.read()
    assert first.startswith(b"fake instance")
    provider.cloud.exit(instance_id, code=0)
    rest = read_all(stream)
    lines = (first + rest).decode().splitlines()
    assert lines == [f"fake instance {instance_id} line {n}" for n in range(1, len(lines) + 1)]


def test_close_ends_a_blocked_follow_read(make: Any) -> None:
    provider = make({"log": {"lines": [], "interval": 1}})
    stream = provider.logs(start(provider), LogOptions(follow=True))
    timer = threading.Timer(0.1, stream.close)
    timer.start()
    assert read_all(stream) == b""
    timer.join()


def test_logs_of_an_unknown_instance_or_of_a_previous_run_that_never_was_are_not_found(make: Any) -> None:
    provider = make()
    with pytest.raises(errors.NotFound):
        provider.logs(InstanceId("fake-404"), LogOptions())
    with pytest.raises(errors.NotFound, match="no previous run"):
        provider.logs(start(provider), LogOptions(previous=True))


def test_exec_cat_echoes_stdin_until_eof(make: Any) -> None:
    provider = make()
    proc = provider.exec(start(provider), ["cat"], tty=False, stdin=True)
    proc.write_stdin(b"ping\n")
    assert proc.read_stdout() == b"ping\n"
    proc.write_stdin(b"pong")
    proc.close_stdin()
    assert read_all(proc) == b"pong"
    assert proc.wait(5) == 0
    assert proc.read_stderr() == b""
    proc.close()


@pytest.mark.parametrize(
    ("command", "stdout", "stderr", "code"),
    [
        (["echo", "hello", "world"], b"hello world\n", b"", 0),
        (["sh", "-c", "exit 3"], b"", b"", 3),
        (["sh", "-c", "echo via shell"], b"via shell\n", b"", 0),
        (["true"], b"", b"", 0),
        (["false"], b"", b"", 1),
        (["nvidia-smi"], b"", b"fake: command not found: nvidia-smi\n", 127),
    ],
)
def test_exec_scripted_commands(make: Any, command: list[str], stdout: bytes, stderr: bytes, code: int) -> None:
    provider = make()
    proc = provider.exec(start(provider), command, tty=False, stdin=False)
    assert proc.wait(5) == code
    assert read_all(proc) == stdout
    assert proc.read_stderr() == stderr
    proc.close()


def test_exec_canned_commands_come_from_the_scenario(make: Any) -> None:
    provider = make({"exec": {"commands": {"nvidia-smi": {"stdout": "8x H100\n", "exit_code": 0}}}})
    proc = provider.exec(start(provider), ["nvidia-smi"], tty=False, stdin=False)
    assert read_all(proc) == b"8x H100\n" and proc.wait(5) == 0


def test_stty_size_reports_the_last_resize(make: Any) -> None:
    provider = make()
    instance_id = start(provider)
    proc = provider.exec(instance_id, ["stty", "size"], tty=True, stdin=True)
    proc.resize(cols=100, rows=30)
    proc.resize(cols=132, rows=43)
    assert read_all(proc) == b"43 132\n"
    assert proc.wait(5) == 0
    proc.close()
    no_tty = provider.exec(instance_id, ["stty", "size"], tty=False, stdin=False)
    assert no_tty.wait(5) == 1 and b"ioctl" in no_tty.read_stderr()


def test_a_tty_merges_stderr_into_stdout_and_ctrl_d_ends_cat(make: Any) -> None:
    provider = make()
    instance_id = start(provider)
    missing = provider.exec(instance_id, ["nope"], tty=True, stdin=False)
    assert b"command not found" in read_all(missing) and missing.read_stderr() == b""
    cat = provider.exec(instance_id, ["cat"], tty=True, stdin=True)
    cat.write_stdin(b"typed\x04ignored")
    assert read_all(cat) == b"typed" and cat.wait(5) == 0


def test_close_kills_a_running_command_and_exec_needs_a_running_instance(make: Any) -> None:
    provider = make()
    instance_id = start(provider)
    proc = provider.exec(instance_id, ["cat"], tty=False, stdin=True)
    assert proc.wait(0.05) is None
    proc.close()
    proc.close()
    assert proc.wait(1) == 137
    provider.cloud.exit(instance_id, code=0)
    with pytest.raises(errors.NotFound):
        provider.exec(instance_id, ["true"], tty=False, stdin=False)
