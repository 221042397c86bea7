"""The clouds of the Pod-contract-in-time tests, one context manager per provider, each
yielding `build`: a fresh provider object on the same cloud state (the manager's, at start
and after a restart), as tests/support/rigs/timebound.py's TimeRig asks. Local: processes on
this machine. Fake: an in-process fake cloud named for the module. AWS: EC2 on moto whose
instances boot (tests/providers/aws/ec2_vms.py) and are reached over SSH with fake docker.
Modal and RunPod: their fakes, spoken to only by the vendor SDKs (as tests/support/rigs/clouds.py).

Used by tests/vnode/test_time_contract.py and tests/vnode/test_time_details.py; nothing here
is a test. Each leaves no process of its own running after it exits.
"""

from __future__ import annotations

import importlib
import os
import pwd
import socket
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from providers.base import Provider
from providers.owner import Owner
from tests.support.local_cleanup import kill_leftovers
from tests.support.rigs.clouds import credentials
from tests.support.rigs.timebound import POLL, WORK

Build = Callable[[], Provider]
CLUSTER = "time-cluster"  # the owner's cluster name, the same across restarts


@contextmanager
def local_cloud(folder: Path) -> Iterator[Build]:
    from providers.local import LocalProvider

    state = folder / "state"
    try:
        yield lambda: LocalProvider("local", {"state_dir": str(state), "poll_interval": POLL})
    finally:
        kill_leftovers(state)


@contextmanager
def fake_cloud(alias: str = "fake", scenario: Mapping[str, Any] | None = None) -> Iterator[Build]:
    from providers.fake import FakeProvider
    from providers.fake.registry import forget

    name = f"time-{alias}-{uuid.uuid4().hex[:8]}"
    options = {"cloud": name, "scenario": {"poll_interval": POLL, **(scenario or {})}}
    try:
        yield lambda: FakeProvider(alias, options)
    finally:
        forget(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def aws_cloud(folder: Path) -> Iterator[Build]:
    from moto import mock_aws

    from providers.aws.keys import generate_key_pair
    from tests.providers.aws.ec2_vms import booting_vms
    from tests.providers.aws.moto_ec2 import make_provider, serve_consoles

    user, port = pwd.getpwuid(os.getuid()).pw_name, _free_port()
    key_file = folder / "operator-key"  # the mounted Secret a restarted manager logs in with again
    key_file.write_bytes(generate_key_pair("nebula-operator").private_openssh)
    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        serve_consoles(patch)
        with booting_vms(folder / "vms", region="us-east-1", ssh_port=port, ssh_user=user):
            yield lambda: make_provider(
                CLUSTER,
                ssh=True,
                ssh_port=port,
                ssh_user=user,
                ssh_key_file=str(key_file),
                poll_interval=POLL,
                connect_timeout=5,
            )


@contextmanager
def modal_cloud(folder: Path) -> Iterator[Build]:
    from providers.modal import ModalProvider
    from providers.modal.fake import start_fake_modal

    with pytest.MonkeyPatch.context() as patch, start_fake_modal() as modal:
        patch.setenv("MODAL_SANDBOX_V2", "0")  # the fake serves V1 sandboxes, as deploy/components/modal asks
        secrets = {"MODAL_TOKEN_ID": modal.token_id, "MODAL_TOKEN_SECRET": modal.token_secret}
        options = {"server_url": modal.url, "credentials_dir": credentials(folder / "modal-creds", secrets),
                   "regions": ["us-east"], "poll_interval": POLL, "log_poll_interval": 0.2}  # fmt: skip
        yield lambda: ModalProvider("modal", options, owner=Owner(CLUSTER, "modal"))


@contextmanager
def runpod_cloud(folder: Path) -> Iterator[Build]:
    from providers.runpod import RunPodProvider

    reason = importlib.import_module("tests.providers.runpod.runpod_pods").can_run_pods()
    if reason:
        pytest.skip(reason)
    # By name: mypy on this file would take tests/providers/runpod for the SDK's `runpod`.
    fake_runpod = importlib.import_module("tests.providers.runpod.fake_runpod")
    with fake_runpod.start_fake_runpod(folder=folder / "runpod") as runpod:
        key = credentials(folder / "runpod-creds", {"RUNPOD_API_KEY": runpod.api_key})
        options = {"api_base_url": runpod.url, "credentials_dir": key, "regions": ["US-TX-3"], "poll_interval": POLL}
        yield lambda: RunPodProvider("runpod", options, owner=Owner(CLUSTER, "runpod"))


# The fake runs no shell: WORKLOADS' containers, scripted by name (docs/providers/fake.md).
FAKE_WORKLOADS = {
    "checkpointer": {"sigterm": {"seconds": WORK, "exit_code": 143}},
    "stubborn": {"sigterm": "ignore"},
    "hooked": {},  # dies of SIGTERM at once: 143
}

CLOUDS: dict[str, Callable[[Path], Any]] = {
    "local": local_cloud,
    "fake": lambda folder: fake_cloud(scenario={"workload": {"containers": FAKE_WORKLOADS}}),
    "aws": aws_cloud,
    "modal": modal_cloud,
    "runpod": runpod_cloud,
}
