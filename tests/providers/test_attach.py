"""Attacher (kubectl attach) for the local and fake providers: the console from now on,
stdin to the workload when the Pod asked for one, and an attachment that ends without
touching the workload."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from providers.base import Attacher, InstanceState, PodSpec, ProvisionRequest
from providers.claim import claim_name
from providers.errors import NotFound, NotSupported
from providers.fake import FakeProvider
from providers.local import LocalProvider, pids
from tests.support.polling import wait_for


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalProvider]:
    provider = LocalProvider("local", {"state_dir": str(tmp_path), "grace_period": 1})
    yield provider
    for instance in provider.list():
        provider.terminate(instance.id)
    wait_for(lambda: not provider.list())


def start(provider: LocalProvider, script: str, *, stdin: bool) -> Any:
    uid = str(uuid.uuid4())
    pod = PodSpec("default", "attached", uid, "main", "busybox", command=("sh", "-c", script), stdin=stdin)
    result = provider.provision(pod, ProvisionRequest(claim=claim_name("default", "attached", uid)))
    wait_for(lambda: (i := provider.get(result.instance_id)) is not None and i.state is InstanceState.RUNNING)
    return result.instance_id


def read_until(read: Callable[[int], bytes], expected: bytes) -> bytes:
    seen = b""
    while expected not in seen:
        chunk = read(65536)
        assert chunk, f"output ended before {expected!r}: {seen!r}"
        seen += chunk
    return seen


def test_local_attach_writes_to_the_workloads_stdin_and_reads_its_console(local: LocalProvider) -> None:
    instance = start(local, 'while read line; do echo "got $line"; done', stdin=True)
    assert isinstance(local, Attacher)
    first = local.attach(instance, stdin=True, tty=False)
    first.write_stdin(b"one\n")
    assert b"got one" in read_until(first.read_stdout, b"got one")
    first.close_stdin()
    first.close()
    second = local.attach(instance, stdin=True, tty=False)  # the workload's stdin stayed open
    second.write_stdin(b"two\n")
    assert b"got one" not in read_until(second.read_stdout, b"got two")  # output from now on only
    assert second.wait(0) is None and second.read_stderr() == b""
    second.close()
    assert local.get(instance).state is InstanceState.RUNNING  # type: ignore[union-attr]


def test_local_attach_without_a_pod_stdin_drops_input_and_output_ends_at_exit(local: LocalProvider) -> None:
    instance = start(local, "read x || echo no-stdin; sleep 0.5; echo bye; exit 4", stdin=False)
    attachment = local.attach(instance, stdin=True, tty=False)
    attachment.write_stdin(b"dropped\n")
    output = b""
    while chunk := attachment.read_stdout(65536):
        output += chunk
    assert b"bye" in output and attachment.wait(30) == 4
    attachment.close()


def test_local_attach_to_an_unknown_instance_is_not_found(local: LocalProvider) -> None:
    with pytest.raises(NotFound):
        local.attach("local-nope", stdin=False, tty=False)  # type: ignore[arg-type]


def test_fake_attach_echoes_stdin_in_process_and_refuses_over_http() -> None:
    provider = FakeProvider("fake", {"cloud": f"attach-{uuid.uuid4().hex}"})
    uid = str(uuid.uuid4())
    result = provider.provision(
        PodSpec("default", "p", uid, "main", "busybox"), ProvisionRequest(claim_name("default", "p", uid))
    )
    wait_for(lambda: (i := provider.get(result.instance_id)) is not None and i.state is InstanceState.RUNNING)
    attachment = provider.attach(result.instance_id, stdin=True, tty=False)
    attachment.write_stdin(b"ping\n")
    attachment.close_stdin()
    assert read_until(attachment.read_stdout, b"ping\n") == b"ping\n"
    attachment.close()
    with pytest.raises(NotSupported):
        FakeProvider("fake", {"url": "http://127.0.0.1:9"}).attach(result.instance_id, stdin=False, tty=False)


def test_local_attach_output_ends_when_the_workload_dies_without_an_exit_record(local: LocalProvider) -> None:
    """As after a reboot or an OOM kill of the supervisor: no exit code will ever be
    written, so the console ends once nothing of the instance lives, instead of hanging."""
    instance = start(local, "echo up; exec sleep 300", stdin=False)
    attached = local.attach(instance, stdin=False, tty=False)
    folder = local.root / str(instance).rsplit(".", 1)[-1]  # local-<cluster>.<alias>.<claim>
    wait_for(lambda: "workload" in json.loads((folder / "run.json").read_text()), ignoring=(OSError,))  # spawn first
    supervisor, workload = (
        pids.ProcessIdentity.from_json(json.loads((folder / record).read_text())[key])
        for record, key in (("launch.json", "supervisor"), ("run.json", "workload"))
    )
    assert supervisor is not None and workload is not None
    os.kill(supervisor.pid, signal.SIGKILL)
    os.killpg(workload.pid, signal.SIGKILL)
    ended = threading.Event()

    def drain() -> None:
        while attached.read_stdout(65536):
            pass
        ended.set()

    threading.Thread(target=drain, daemon=True).start()
    assert ended.wait(30), "the attachment's output did not end"
    assert not (folder / "exit.json").exists()
    attached.close()
