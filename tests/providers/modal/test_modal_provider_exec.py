"""`kubectl exec` through `ModalProvider.exec` (the SDK's Sandbox.exec, against the fake):
real output, stdin, a TTY (started at the client's first size, as Modal has no resize), exit
codes; and exec in a sandbox not running is NotFound."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import InstanceState, Process
from providers.modal import ModalProvider
from providers.modal.process import FIRST_SIZE_WAIT
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for
from tests.support.polling import wait_for

__all__ = ["fake_modal"]


def _running(provider: ModalProvider) -> Any:
    pod = make_pod()
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: (provider.get(instance_id) or pod) and provider.get(instance_id).state  # type: ignore[union-attr]
             is InstanceState.RUNNING, 20)  # fmt: skip
    return instance_id


def _drain(read: Any) -> bytes:
    out = b""
    while chunk := read():
        out += chunk
    return out


def test_exec_gives_output_stderr_and_the_exit_code(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    process: Process = provider.exec(_running(provider), ["sh", "-c", "echo out; echo err >&2; exit 5"], tty=False,
                                     stdin=False)  # fmt: skip
    assert _drain(process.read_stdout) == b"out\n" and _drain(process.read_stderr) == b"err\n"
    assert process.wait(20) == 5
    process.close()


def test_exec_reads_stdin_to_eof(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    process = provider.exec(_running(provider), ["cat"], tty=False, stdin=True)
    process.write_stdin(b"hello\n")
    process.close_stdin()
    assert _drain(process.read_stdout) == b"hello\n" and process.wait(20) == 0
    process.resize(80, 24)  # no window-size call in Modal's exec: a no-op
    process.close()


def test_exec_with_a_tty_merges_stderr(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    process = provider.exec(_running(provider), ["sh", "-c", "echo err >&2"], tty=True, stdin=False)
    assert b"err" in _drain(process.read_stdout) and process.read_stderr() == b""
    assert process.wait(20) == 0


def test_a_tty_starts_at_the_first_size_and_keeps_stdin_sent_before_it(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    process = provider.exec(_running(provider), ["sh", "-c", "read line; stty size; echo got $line"], tty=True,
                            stdin=True)  # fmt: skip
    process.write_stdin(b"early\n")  # typed before kubectl sent the terminal's size
    process.resize(111, 33)  # the first size starts the command: cols, rows
    out = _drain(process.read_stdout)
    assert b"33 111" in out and b"got early" in out and process.wait(20) == 0


def test_a_later_size_reaches_the_running_tty_through_a_helper_exec(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    process = provider.exec(_running(provider), ["sh"], tty=True, stdin=True)
    process.resize(80, 24)
    seen = b""

    def shows(size: bytes) -> bool:
        nonlocal seen
        process.write_stdin(b"stty size\n")
        seen += process.read_stdout()
        return size in seen

    wait_for(lambda: shows(b"24 80"), 20)
    for cols, rows in ((100, 30), (120, 40)):  # the newest size wins
        process.resize(cols, rows)
    wait_for(lambda: shows(b"40 120"), 20)
    process.write_stdin(b"exit 4\n")
    assert process.wait(20) == 4
    process.close()


def test_a_tty_with_no_size_in_time_starts_at_24x80(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    process = provider.exec(_running(provider), ["stty", "size"], tty=True, stdin=False)
    assert _drain(process.read_stdout) == b"24 80\r\n" and process.wait(20) == 0


def test_a_tty_closed_before_its_first_size_never_starts(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    process = provider.exec(_running(provider), ["sh"], tty=True, stdin=True)
    process.close()  # the client left before it sent a size
    time.sleep(FIRST_SIZE_WAIT + 0.5)  # past the moment a default size would have started it
    assert "TaskExecStart" not in fake_modal.calls() and process.wait(0) is None


def test_exec_where_nothing_runs_is_not_found(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(command=("true",))
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: (provider.get(instance_id) or pod) and provider.get(instance_id).state  # type: ignore[union-attr]
             is InstanceState.SUCCEEDED, 20)  # fmt: skip
    with pytest.raises(errors.NotFound):
        provider.exec(instance_id, ["true"], tty=False, stdin=False)
