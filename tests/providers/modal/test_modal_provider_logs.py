"""`kubectl logs` through `ModalProvider.logs`: Modal's log store (`Sandbox.logs.fetch`,
the AppFetchLogs RPC), stamped entries, tail, limit, follow to the end; `previous` and unknown
ids need no log store. Stdout and stderr are two streams merged by arrival time, so a script
that writes both pauses between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import InstanceId, InstanceState, LogOptions
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for
from tests.support.polling import wait_for

__all__ = ["fake_modal"]


def _read_all(stream: Any) -> bytes:
    out = b""
    while chunk := stream.read():
        out += chunk
    return out


def test_logs_give_the_output_tail_and_timestamps(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(command=("sh", "-c", "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three"))
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: (provider.get(instance_id) or pod) and provider.get(instance_id).state  # type: ignore[union-attr]
             is InstanceState.SUCCEEDED, 20)  # fmt: skip
    assert _read_all(provider.logs(instance_id, LogOptions())) == b"one\ntwo\nthree\n"
    assert _read_all(provider.logs(instance_id, LogOptions(tail_lines=1))) == b"three\n"
    assert _read_all(provider.logs(instance_id, LogOptions(limit_bytes=5))) == b"one\nt"
    stamped = _read_all(provider.logs(instance_id, LogOptions(timestamps=True))).splitlines()
    assert all(line.split(b" ", 1)[0].endswith(b"Z") for line in stamped)


def test_follow_ends_when_the_sandbox_exits(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(command=("sh", "-c", "echo start; sleep 1; echo end"))
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    assert _read_all(provider.logs(instance_id, LogOptions(follow=True))) == b"start\nend\n"


def test_previous_and_unknown_instances_are_refused(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    with pytest.raises(errors.NotSupported):
        provider.logs(InstanceId("sb-x"), LogOptions(previous=True))
    with pytest.raises(errors.NotFound):
        provider.logs(InstanceId("sb-doesnotexist0000000000"), LogOptions())
