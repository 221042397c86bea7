"""The Modal fake's exec through the real `modal` SDK and its command router (reached via
TaskGetCommandRouterAccess with a JWT): a real child process with stdin, stdout, stderr, env,
the sandbox's folder, a pty when asked, and its exit code (or the signal that killed it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import modal
import pytest

from providers.modal.fake import FakeModal
from tests.providers.modal.modal_fake_rig import app_for
from tests.support.polling import wait_for


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


def test_a_signal_from_an_exec_ends_the_sandbox_as_the_kernel_says_and_its_execs_with_it(client: Any) -> None:
    """Modal gives every process of the sandbox MODAL_TASK_ID; an exec that signals the
    sandbox's command ends it with 128 + N (143 for SIGTERM), and the sandbox's end kills
    what else of it ran: its command's children and its execs (whose end the router
    reports as the signal, which the SDK reads as 128 + N)."""
    script = "echo $$ > main; sleep 600 & echo $! > child; wait"
    sb = modal.Sandbox.create("sh", "-c", script, app=app_for(client), client=client)
    lingering = sb.exec("sleep", "600")
    task = sb.exec("sh", "-c", 'echo "$MODAL_TASK_ID"')
    assert task.wait() == 0 and task.stdout.read().strip() == sb._get_task_id()
    child = sb.exec("sh", "-c", "while [ ! -s child ]; do sleep 0.05; done; cat child")
    assert child.wait() == 0
    child_pid = int(child.stdout.read())
    signal_it = sb.exec("sh", "-c", "kill -TERM $(cat main)")
    assert signal_it.wait() in (0, 137)  # it may die with the sandbox before it exits
    assert sb.wait(raise_on_termination=False) is None and sb.returncode == 143
    assert lingering.wait() == 137
    wait_for(lambda: not Path(f"/proc/{child_pid}").exists(), 10, what="the command's child killed")
