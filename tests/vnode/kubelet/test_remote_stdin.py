"""I7 for stdin a command does not read (vnode/kubelet/remote.py): a SPDY client is paused at
STDIN_HIGH_WATER; one the outlet cannot pause (a websocket: Channels cannot stop reading) has
its session ended past STDIN_MAX queued, with the reason on the error channel."""

from __future__ import annotations

import json
import threading

import pytest

from providers.local.process import start_process
from tests.support.polling import wait_for
from vnode.kubelet import remote
from vnode.kubelet.execparams import StreamRequest
from vnode.kubelet.remote import RemoteSession


class Unpausable:
    """An outlet like the websocket consumer's: it cannot stop its client."""

    def __init__(self) -> None:
        self.paused: list[bool] = []
        self.finished: list[bytes] = []
        self.done = threading.Event()

    def write(self, stream: str, data: bytes) -> None:
        pass

    def close_stream(self, stream: str) -> None:
        pass

    def finish(self, status: bytes) -> None:
        self.finished.append(status)
        self.done.set()

    def pause_input(self, paused: bool) -> None:
        self.paused.append(paused)


def test_I7_stdin_a_client_keeps_sending_past_the_bound_ends_its_session_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote, "STDIN_MAX", 8 * 1024 * 1024)
    outlet = Unpausable()
    processes = []

    def start() -> object:
        processes.append(start_process(["sleep", "60"], cwd="/", env={}, tty=False, stdin=True))
        return processes[-1]

    request = StreamRequest(command=("sleep", "60"), stdin=True, stdout=True, stderr=True, tty=False)
    session = RemoteSession(start, request, outlet, json_status=True, attach=False)  # type: ignore[arg-type]
    session.start()
    wait_for(lambda: processes, 30, 0.05, what="the command started")
    chunk = b"x" * 65536
    sent = 0
    while not outlet.done.is_set() and sent <= 4 * remote.STDIN_MAX:
        session.stdin(chunk)  # the pipe holds 64 KiB; the rest queues, the outlet cannot pause
        sent += len(chunk)
    assert outlet.done.wait(30), "the session did not end"
    assert outlet.paused[:1] == [True]  # asked at the high water, to no effect
    assert sent <= remote.STDIN_MAX + remote.STDIN_HIGH_WATER + len(chunk) * 32
    status = json.loads(outlet.finished[0])
    assert status["status"] == "Failure" and f"over {remote.STDIN_MAX} bytes of stdin" in status["message"]
    assert processes[0].wait(30) is not None  # the command was killed
    assert len(outlet.finished) == 1  # the session's own end said nothing more
