"""`RunPodProvider` logs (tail, limit, timestamps, since, follow), exec and usage over real SSH
to the fake's pods, with the key derived again by a restarted provider."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from providers import errors
from providers.base import InstanceId, InstanceState, LogOptions, LogStream, PodSpec, ProvisionRequest
from providers.claim import claim_name
from providers.runpod import RunPodProvider
from tests.providers.runpod.fake_runpod import FakeRunPod
from tests.support.polling import wait_for


def make(fake: FakeRunPod, tmp_path: Path) -> RunPodProvider:
    creds = tmp_path / "creds"
    creds.mkdir(exist_ok=True)
    (creds / "RUNPOD_API_KEY").write_text(fake.api_key)
    return RunPodProvider("runpod", {"api_base_url": fake.url, "credentials_dir": str(creds)})


def start(provider: RunPodProvider, script: str, working_dir: str | None = None) -> InstanceId:
    pod = PodSpec("default", "w", str(uuid.uuid4()), "main", "busybox", ("sh", "-c", script), working_dir=working_dir)
    result = provider.provision(pod, ProvisionRequest(claim=claim_name("default", "w", pod.uid)))

    def running() -> bool:
        found = provider.get(result.instance_id)
        return found is not None and found.state in (InstanceState.RUNNING, InstanceState.SUCCEEDED)

    wait_for(running, 30, what="the workload")
    return result.instance_id


def read_all(stream: LogStream) -> bytes:
    out = bytearray()
    try:
        while chunk := stream.read():
            out += chunk
    finally:
        stream.close()
    return bytes(out)


def test_logs_tail_limit_timestamps_and_since(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path)
    pod_id = start(provider, "echo one; echo two >&2; sleep 2; echo three; sleep 600")
    wait_for(lambda: b"three" in read_all(provider.logs(pod_id, LogOptions())), 30, what="the third line")
    restarted = make(fake, tmp_path)  # derives the pod's key again
    assert read_all(restarted.logs(pod_id, LogOptions())) == b"one\ntwo\nthree\n"
    assert read_all(restarted.logs(pod_id, LogOptions(tail_lines=1))) == b"three\n"
    assert read_all(restarted.logs(pod_id, LogOptions(limit_bytes=4))) == b"one\n"
    stamped = read_all(restarted.logs(pod_id, LogOptions(timestamps=True))).splitlines()
    first_time = datetime.fromisoformat(stamped[0].split(b" ")[0].decode())
    assert [line.split(b" ", 1)[1] for line in stamped] == [b"one", b"two", b"three"]
    since = first_time + timedelta(seconds=1)
    assert read_all(restarted.logs(pod_id, LogOptions(since=since))) == b"three\n"
    with pytest.raises(errors.NotSupported):
        restarted.logs(pod_id, LogOptions(previous=True))


def test_follow_ends_when_the_workload_exits(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path)
    pod_id = start(provider, "echo a; sleep 2; echo b")
    begun = time.monotonic()
    assert read_all(provider.logs(pod_id, LogOptions(follow=True))) == b"a\nb\n"
    assert time.monotonic() - begun < 20
    wait_for(lambda: (provider.get(pod_id) or pytest.fail("gone")).state is InstanceState.SUCCEEDED, 20)


def test_exec_with_stdin_and_usage(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path)
    pod_id = start(provider, "while :; do :; done", working_dir="/tmp")
    process = provider.exec(pod_id, ["sh", "-c", "cat; echo $NEBULA_CLAIM; pwd; exit 4"], tty=False, stdin=True)
    process.write_stdin(b"piped\n")
    process.close_stdin()
    assert process.wait(30) == 4
    out = process.read_stdout()
    process.close()
    assert out.startswith(b"piped\ndefault-w-") and out.endswith(b"\n/tmp\n")
    usage = provider.usage(pod_id)
    assert usage is not None and (usage.total.memory_bytes or 0) > 0
    with pytest.raises(errors.NotFound):
        provider.exec(InstanceId("nosuchpod"), ["true"], tty=False, stdin=False)
