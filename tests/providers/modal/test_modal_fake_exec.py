"""The Modal fake's exec through the real `modal` SDK and its command router (reached via
TaskGetCommandRouterAccess with a JWT): a real child process with stdin, stdout, stderr, env,
the sandbox's folder, a pty when asked, and its exit code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import modal
import pytest

from providers.modal.fake import FakeModal
from tests.providers.modal.modal_fake_rig import app_for


@pytest.fixture
def sandbox(client: Any) -> Iterator[Any]:
    env = modal.Secret.from_dict({"FROM_SANDBOX": "yes"})
    sb = modal.Sandbox.create(
        "sh", "-c", "echo here > marker; sleep 60", app=app_for(client), secrets=[env], client=client
    )
    yield sb
    sb.terminate()


def test_exec_streams_stdin_stdout_stderr_and_returns_the_exit_code(sandbox: Any, fake: FakeModal) -> None:
    process = sandbox.exec("sh", "-c", "read x; echo got $x; echo oops >&2; exit 5")
    process.stdin.write(b"hello\n")
    process.stdin.write_eof()
    process.stdin.drain()
    assert process.stdout.read() == "got hello\n"
    assert process.stderr.read() == "oops\n"
    assert process.wait() == 5
    assert "TaskGetCommandRouterAccess" in fake.calls() and "TaskExecStart" in fake.calls()


def test_exec_gets_the_sandbox_env_its_own_env_and_the_sandbox_folder(sandbox: Any) -> None:
    process = sandbox.exec("sh", "-c", 'cat marker; echo "$FROM_SANDBOX $OWN"', env={"OWN": "mine"})
    assert process.wait() == 0
    assert process.stdout.read() == "here\nyes mine\n"


def test_exec_with_a_pty_is_a_terminal(sandbox: Any) -> None:
    process = sandbox.exec("sh", "-c", "test -t 0 && test -t 1 && echo tty; exit 7", pty=True)
    assert process.wait() == 7
    assert "tty" in process.stdout.read()


def test_exec_in_an_ended_sandbox_fails(client: Any) -> None:
    sb = modal.Sandbox.create("true", app=app_for(client), client=client)
    sb.wait()
    with pytest.raises(modal.exception.Error):
        sb.exec("true").wait()
