"""`vnode.ephemeral.containers` at the provider seam: the status transitions of an ephemeral container
(waiting ContainerCreating, running with startedAt, terminated with exitCode, reason and
finishedAt), never restarted, the not-supported case for a provider without exec, a start
error, a container lost with an earlier manager, attach fan-out, kept logs, and the Pod's
deletion closing the process. The executor double runs real processes (the local provider's
process layer); only the provider around it is a stand-in. One test runs the whole vnode on
the embedded cluster with a fake cloud that cannot exec."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from kube.client import Kube, path_for
from providers import errors
from providers.base import ClaimName, InstanceId, LogOptions, Process, Provider
from providers.fake import FakeProvider
from providers.local.process import start_process
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.ephemeral import streams
from vnode.ephemeral.containers import CREATING, LOST, NOT_SUPPORTED, Ephemerals
from vnode.model.tracking import Tracked
from vnode.runner import Runner

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class ExecDouble:
    """An Executor whose exec runs `command` for real once `release` is set."""

    name = "double"

    def __init__(self, *, fail: errors.ProviderError | None = None) -> None:
        self.release = threading.Event()
        self.calls: list[tuple[str, list[str], bool, bool, str]] = []
        self.fail = fail
        self.started: list[Process] = []

    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Process:
        self.calls.append((instance_id, list(command), tty, stdin, container))
        assert self.release.wait(30)
        if self.fail is not None:
            raise self.fail
        process = start_process(list(command), cwd="/", env={"PATH": "/usr/bin:/bin"}, tty=tty, stdin=stdin)
        self.started.append(process)
        return process


class NoExecDouble:
    """A provider with no Executor: it cannot run anything in its instances."""

    name = "noexec"


def make_entry(*ephemeral: dict[str, Any], status: dict[str, Any] | None = None) -> Tracked:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}, {"name": "side", "image": "x"}]}
    spec["ephemeralContainers"] = list(ephemeral)
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": str(uuid.uuid4())}, "spec": spec, "status": status or {}}
    entry = Tracked("ns", "p", pod["metadata"]["uid"], ClaimName("claim"), pod, instance_id=InstanceId("i-1"))
    entry.desired_status = {"phase": "Running"}
    return entry


def make_ephemerals(provider: object, *, several: bool = True) -> tuple[Ephemerals, list[str]]:
    changed: list[str] = []
    ephemerals = Ephemerals(
        cast(Provider, provider),
        now=lambda: NOW,
        changed=changed.append,
        pulls_images=lambda: False,
        several_containers=lambda: several,
    )
    return ephemerals, changed


def status_of(ephemerals: Ephemerals, entry: Tracked, name: str = "dbg") -> dict[str, Any]:
    ephemerals.overlay(entry)
    assert entry.desired_status is not None
    return next(s for s in entry.desired_status["ephemeralContainerStatuses"] if s["name"] == name)


def state_of(ephemerals: Ephemerals, entry: Tracked, name: str = "dbg") -> str:
    return str(next(iter(status_of(ephemerals, entry, name)["state"])))


SHELL = {"name": "dbg", "image": "busybox", "command": ["sh"], "stdin": True, "targetContainerName": "side"}


def start_running(container: dict[str, Any]) -> tuple[ExecDouble, Ephemerals, Tracked]:
    """A released executor double, its manager, and a Pod whose one ephemeral container is running."""
    double = ExecDouble()
    double.release.set()
    ephemerals, _ = make_ephemerals(double)
    entry = make_entry(container)
    ephemerals.sync(entry)
    wait_for(lambda: state_of(ephemerals, entry) == "running")
    return double, ephemerals, entry


def test_status_goes_waiting_running_terminated_and_is_never_restarted() -> None:
    double = ExecDouble()
    ephemerals, changed = make_ephemerals(double)
    entry = make_entry(SHELL)
    ephemerals.sync(entry)
    waiting = status_of(ephemerals, entry)
    assert waiting["state"] == {"waiting": {"reason": CREATING}} and "containerID" not in waiting
    assert entry.desired_status is not None and entry.desired_status["phase"] == "Running"
    double.release.set()
    wait_for(lambda: state_of(ephemerals, entry) == "running")
    running = status_of(ephemerals, entry)
    assert running["state"]["running"]["startedAt"] == "2026-01-02T03:04:05Z"
    assert running["containerID"] == "nebula://i-1/dbg" and running["restartCount"] == 0
    # The target container's context, the command as the spec says (stdin, no tty).
    assert double.calls == [("i-1", ["sh"], False, True, "side")]
    attached = ephemerals.attach(entry.key, "dbg")
    attached.write_stdin(b"echo out-$((2+3)); echo err >&2; exit 4\n")
    assert attached.read_stdout() == b"out-5\n"
    assert attached.read_stderr() == b"err\n"
    wait_for(lambda: state_of(ephemerals, entry) == "terminated")
    ended = status_of(ephemerals, entry)["state"]["terminated"]
    assert ended == {
        "exitCode": 4,
        "reason": "Error",
        "startedAt": "2026-01-02T03:04:05Z",
        "finishedAt": "2026-01-02T03:04:05Z",
    }
    assert changed.count(entry.key) >= 2  # running, then terminated, each queued a flush
    assert [reason for _, reason, _ in entry.events] == ["ImageNotUsed", "Started"]
    ephemerals.sync(entry)
    assert len(double.calls) == 1 and state_of(ephemerals, entry) == "terminated"


def test_without_several_containers_the_instance_itself_is_the_context() -> None:
    double = ExecDouble()
    double.release.set()
    ephemerals, _ = make_ephemerals(double, several=False)
    entry = make_entry({"name": "dbg", "image": "busybox", "command": ["true"]})
    ephemerals.sync(entry)
    wait_for(lambda: state_of(ephemerals, entry) == "terminated")
    assert double.calls == [("i-1", ["true"], False, False, "")]
    assert status_of(ephemerals, entry)["state"]["terminated"]["reason"] == "Completed"


def test_a_provider_without_exec_reports_waiting_with_a_reason_and_a_warning() -> None:
    ephemerals, changed = make_ephemerals(NoExecDouble())
    entry = make_entry(SHELL)
    ephemerals.sync(entry)
    waiting = status_of(ephemerals, entry)["state"]["waiting"]
    assert waiting["reason"] == NOT_SUPPORTED and "'noexec'" in waiting["message"]
    [(kind, reason, message)] = entry.events
    assert kind == "Warning" and reason == "Failed" and "'noexec' cannot run ephemeral containers" in message
    assert changed == [entry.key]
    with pytest.raises(errors.NotFound):
        ephemerals.attach(entry.key, "dbg")


def test_an_exec_that_fails_is_terminated_with_start_error() -> None:
    double = ExecDouble(fail=errors.NotFound("command 'sh' not found in the instance"))
    double.release.set()
    ephemerals, _ = make_ephemerals(double)
    entry = make_entry(SHELL)
    ephemerals.sync(entry)
    wait_for(lambda: state_of(ephemerals, entry) == "terminated")
    ended = status_of(ephemerals, entry)["state"]["terminated"]
    assert ended["reason"] == "StartError" and "not found" in ended["message"] and "startedAt" not in ended
    assert any(kind == "Warning" for kind, _, _ in entry.events)


def test_I9_a_container_shown_by_an_earlier_manager_is_not_run_again() -> None:
    double = ExecDouble()
    ephemerals, _ = make_ephemerals(double)
    running = {"name": "dbg", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
    done = {"name": "old", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    waiting = {"name": "new", "state": {"waiting": {"reason": CREATING}}}
    earlier = {"ephemeralContainerStatuses": [running, done, waiting]}
    entry = make_entry(SHELL, {**SHELL, "name": "old"}, {**SHELL, "name": "new"}, status=earlier)
    ephemerals.sync(entry)
    lost = status_of(ephemerals, entry)["state"]["terminated"]
    assert lost["reason"] == LOST and lost["exitCode"] == 137
    assert status_of(ephemerals, entry, "old") == done
    wait_for(lambda: len(double.calls) == 1)
    assert double.calls[0][1] == ["sh"]  # only the one that never ran starts now
    double.release.set()
    wait_for(lambda: state_of(ephemerals, entry, "new") == "running")
    ephemerals.forget(entry.key)


def test_a_finished_pod_starts_no_ephemeral_container() -> None:
    double = ExecDouble()
    ephemerals, _ = make_ephemerals(double)
    entry = make_entry(SHELL, status={"phase": "Succeeded"})
    ephemerals.sync(entry)
    ephemerals.overlay(entry)
    assert entry.desired_status == {"phase": "Running"} and double.calls == []


def test_two_attachments_see_the_output_and_detaching_keeps_it_running() -> None:
    _, ephemerals, entry = start_running(SHELL)
    first, second = ephemerals.attach(entry.key, "dbg"), ephemerals.attach(entry.key, "dbg")
    first.write_stdin(b"echo one\n")
    assert first.read_stdout() == b"one\n" and second.read_stdout() == b"one\n"
    first.close()
    assert first.read_stdout() == b""
    second.write_stdin(b"echo two\n")
    assert second.read_stdout() == b"two\n" and state_of(ephemerals, entry) == "running"
    logs = ephemerals.logs(entry.key, "dbg", LogOptions(tail_lines=1))
    assert logs.read() == b"two\n"
    with pytest.raises(errors.NotSupported):
        ephemerals.logs(entry.key, "dbg", LogOptions(timestamps=True))
    second.write_stdin(b"exit 0\n")
    wait_for(lambda: state_of(ephemerals, entry) == "terminated")
    whole = ephemerals.logs(entry.key, "dbg", LogOptions(follow=True))
    assert whole.read() == b"one\ntwo\n" and whole.read() == b""


def test_the_pods_deletion_closes_its_ephemeral_processes() -> None:
    double, ephemerals, entry = start_running(SHELL)
    [process] = double.started
    ephemerals.forget(entry.key)
    assert process.wait(10) is not None
    assert not ephemerals.known(entry.key, "dbg")


def test_I10_a_terminal_pods_ephemeral_processes_are_killed() -> None:
    double, ephemerals, entry = start_running(SHELL)
    [process] = double.started
    ephemerals.stop(entry.key)
    assert process.wait(10) is not None
    assert status_of(ephemerals, entry)["state"]["terminated"]["exitCode"] == 137


def test_I9_fields_an_exec_cannot_honour_are_named_in_a_warning() -> None:
    double = ExecDouble()
    double.release.set()
    ephemerals, _ = make_ephemerals(double)
    container = {"name": "dbg", "image": "b", "command": ["true"], "env": [{"name": "A", "value": "secret-value"}]}
    entry = make_entry({**container, "workingDir": "/tmp"})
    ephemerals.sync(entry)
    wait_for(lambda: state_of(ephemerals, entry) == "terminated")
    [warning] = [message for kind, _, message in entry.events if kind == "Warning"]
    assert "env, workingDir not applied" in warning and "secret-value" not in warning


def test_stdin_once_closes_the_containers_stdin_when_the_client_is_done() -> None:
    _, ephemerals, entry = start_running(
        {"name": "dbg", "image": "b", "command": ["cat"], "stdin": True, "stdinOnce": True}
    )
    attached = ephemerals.attach(entry.key, "dbg")
    attached.write_stdin(b"once\n")
    attached.close_stdin()
    wait_for(lambda: state_of(ephemerals, entry) == "terminated")
    assert attached.read_stdout() == b"once\n" and attached.read_stdout() == b""
    assert status_of(ephemerals, entry)["state"]["terminated"]["exitCode"] == 0


class NoExecFake(FakeProvider):
    """The fake cloud with its Executor taken away (a protocol method set to None is absent
    to `isinstance`), as a provider that cannot run commands in its instances."""

    exec = None  # type: ignore[assignment]


def test_without_exec_the_pod_in_the_cluster_says_why_and_warns(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(NoExecFake("gpu", {"cloud": cloud_name}))
    kube.create(path_for("pods", namespace="default"), make_pod("dbg", "gpu"))
    wait_for(lambda: phase_of(kube, "dbg") == "Running", 60)
    body = {"spec": {"ephemeralContainers": [{"name": "debugger", "image": "busybox", "command": ["sh"]}]}}
    kube.patch(path_for("pods", namespace="default", name="dbg", subresource="ephemeralcontainers"), body)

    def waiting() -> dict[str, Any] | None:
        statuses = (get_pod(kube, "dbg") or {}).get("status", {}).get("ephemeralContainerStatuses") or []
        return next((s["state"].get("waiting") for s in statuses if s["name"] == "debugger"), None)

    reason = wait_for(waiting, 30)
    assert reason["reason"] == NOT_SUPPORTED and "'gpu' cannot run ephemeral containers" in reason["message"]

    def warned() -> bool:
        events, _ = kube.list(path_for("events", namespace="default"), fieldSelector="involvedObject.name=dbg")
        return any(e.get("type") == "Warning" and e.get("reason") == "Failed" for e in events)

    wait_for(warned, 30)


def test_on_the_cluster_it_runs_then_the_pods_deletion_closes_it(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    runner = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    kube.create(path_for("pods", namespace="default"), make_pod("dbg", "gpu", terminationGracePeriodSeconds=0))
    wait_for(lambda: phase_of(kube, "dbg") == "Running", 60)
    body = {"spec": {"ephemeralContainers": [{"name": "cat", "image": "b", "command": ["cat"], "stdin": True}]}}
    kube.patch(path_for("pods", namespace="default", name="dbg", subresource="ephemeralcontainers"), body)

    def state() -> dict[str, Any]:
        statuses = (get_pod(kube, "dbg") or {}).get("status", {}).get("ephemeralContainerStatuses") or []
        return next((dict(s["state"]) for s in statuses if s["name"] == "cat"), {})

    assert wait_for(lambda: state().get("running"), 30)["startedAt"]
    attached = runner.handler.serving.attach_to_container("default", "dbg", "cat", tty=False, stdin=True)
    attached.write_stdin(b"echoed\n")
    assert attached.read_stdout() == b"echoed\n"
    kube.delete(path_for("pods", namespace="default", name="dbg"))
    wait_for(lambda: get_pod(kube, "dbg") is None, 60)
    assert attached.read_stdout() == b""  # the process was closed with its Pod
    assert not runner.handler.ephemerals.known("default/dbg", "cat")


def test_a_pod_deleted_while_its_exec_starts_leaves_no_process() -> None:
    double = ExecDouble()
    ephemerals, _ = make_ephemerals(double)
    entry = make_entry({"name": "dbg", "image": "b", "command": ["sleep", "300"]})
    ephemerals.sync(entry)
    wait_for(lambda: len(double.calls) == 1)  # exec is under way, held by the double
    ephemerals.forget(entry.key)
    double.release.set()
    wait_for(lambda: len(double.started) == 1)
    assert double.started[0].wait(10) is not None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (LogOptions(), b"a\nb\nc"),
        (LogOptions(tail_lines=0), b""),
        (LogOptions(tail_lines=1), b"c"),
        (LogOptions(tail_lines=2), b"b\nc"),
        (LogOptions(tail_lines=9), b"a\nb\nc"),
        (LogOptions(limit_bytes=3), b"a\nb"),
        (LogOptions(tail_lines=2, limit_bytes=1), b"b"),
    ],
)
def test_a_one_shot_log_read_is_the_kept_output_as_it_is_now(options: LogOptions, expected: bytes) -> None:
    _, ephemerals, entry = start_running({"name": "dbg", "image": "b", "command": ["cat"], "stdin": True})
    attached = ephemerals.attach(entry.key, "dbg")
    attached.write_stdin(b"a\nb\nc")
    wait_for(lambda: ephemerals.logs(entry.key, "dbg", LogOptions()).read() == b"a\nb\nc")
    reader = ephemerals.logs(entry.key, "dbg", options)
    attached.write_stdin(b"\nlater\n")
    wait_for(lambda: ephemerals.logs(entry.key, "dbg", LogOptions(tail_lines=1)).read() == b"later\n")
    got = b""
    while chunk := reader.read():
        got += chunk
    assert got == expected
    ephemerals.forget(entry.key)


def test_I7_an_attached_client_that_stops_reading_holds_back_bounded_output_then_is_detached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Output waits for a full client (as a container runtime's attach does), never piles up
    for it: at most CLIENT_CHUNKS chunks each, and after SLOW_CLIENT seconds without room it is
    detached while a client that reads gets every byte."""
    monkeypatch.setattr(streams, "SLOW_CLIENT", 1.0)
    _, ephemerals, entry = start_running(SHELL)
    reader, stalled = ephemerals.attach(entry.key, "dbg"), ephemerals.attach(entry.key, "dbg")
    size = 4 * 1024 * 1024  # many times what CLIENT_CHUNKS chunks hold
    reader.write_stdin(f"yes x | head -c {size}; echo end\n".encode())  # "x\n" lines
    got = bytearray()
    while not got.endswith(b"end\n"):
        chunk = reader.read_stdout()
        assert chunk, "the reading client's output ended early"
        got += chunk
        assert stalled.out.qsize() <= streams.CLIENT_CHUNKS
    assert got.count(b"x\n") == size // 2
    fanout = ephemerals._fanout(entry.key, "dbg")
    assert fanout.detached_slow == 1
    drained = b""
    while chunk := stalled.read_stdout():  # what it had queued, then the end of its attach
        drained += chunk
    assert len(drained) <= streams.CLIENT_CHUNKS * streams.READ_SIZE
    reader.write_stdin(b"echo still\n")
    assert reader.read_stdout() == b"still\n" and state_of(ephemerals, entry) == "running"
    reader.write_stdin(b"exit 0\n")
    wait_for(lambda: state_of(ephemerals, entry) == "terminated")


def test_a_client_that_leaves_with_a_full_queue_does_not_hold_the_output_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detached while the output waits for room in its queue: the output goes on for the
    others at once, not after SLOW_CLIENT, and it is not counted as a slow client."""
    monkeypatch.setattr(streams, "SLOW_CLIENT", 120.0)
    _, ephemerals, entry = start_running(SHELL)
    reader, leaving = ephemerals.attach(entry.key, "dbg"), ephemerals.attach(entry.key, "dbg")
    size = 2 * 1024 * 1024
    reader.write_stdin(f"yes x | head -c {size}; echo end\n".encode())
    got = bytearray()
    while leaving.out.qsize() < streams.CLIENT_CHUNKS:  # its queue fills while this one reads
        got += reader.read_stdout()
    leaving.close()
    done = threading.Event()

    def read_rest() -> None:
        while not got.endswith(b"end\n"):
            got.extend(reader.read_stdout())
        done.set()

    threading.Thread(target=read_rest, daemon=True).start()
    assert done.wait(60), "the output stayed held back for the client that left"
    assert got.count(b"x\n") == size // 2
    assert ephemerals._fanout(entry.key, "dbg").detached_slow == 0
    reader.write_stdin(b"exit 0\n")
    wait_for(lambda: state_of(ephemerals, entry) == "terminated")
