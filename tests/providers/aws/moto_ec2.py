"""moto's in-process EC2 as the tests of `providers.aws` drive it: providers of one or two
clusters on one account, Pod specs, and the VM's side of an instance's life.

moto answers GetConsoleOutput with one fixed sample for every instance, and moves an
instance only through the states its API calls cause (pending, running, stopped,
terminated). What a real VM and EC2 would add is set here on moto's own backend objects
(`moto.ec2.models.ec2_backends`): the text the VM wrote to its serial console (an attribute
of moto's `Instance`, served by moto's GetConsoleOutput responder, which `serve_consoles`
teaches to read it; the provider still gets it base64-encoded over EC2's wire protocol), and
the State, StateReason and StateTransitionReason EC2 shows after a shutdown or a reclaim.
Imported by tests/providers/aws only; nothing here is a test.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.core.responses import ActionResult
from moto.core.types import Base64EncodedString
from moto.core.utils import utcnow
from moto.ec2.models import ec2_backends
from moto.ec2.responses.general import General

from providers.aws import AwsProvider
from providers.aws.status import parse_instance_id
from providers.base import PodSpec, ProvisionRequest
from providers.claim import claim_name
from providers.owner import Owner

AMI = "ami-12c6146b"
STATE_CODES = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}
SHUTDOWN = ("Client.InstanceInitiatedShutdown", "Client.InstanceInitiatedShutdown: Instance initiated shutdown")
SPOT_RECLAIM = (
    "Server.SpotInstanceTermination",
    "Server.SpotInstanceTermination: Spot instance termination",
)
CONSOLE_WINDOW = 64 * 1024  # EC2 serves the console's most recent 64 KiB
_CONSOLE = "nebula_test_console"  # the attribute of moto's Instance that holds what the VM wrote


def make_provider(
    cluster: str = "standalone", alias: str = "aws", *, now: Callable[[], datetime] | None = None, **options: Any
) -> AwsProvider:
    values: dict[str, Any] = {"regions": ["us-east-1"], "ami": AMI, "max_attempts": 1, "ssh": False}
    values.update(options)
    if now is None:
        return AwsProvider(alias, values, owner=Owner(cluster, alias))
    return AwsProvider(alias, values, owner=Owner(cluster, alias), now=now)


def make_pod(name: str = "trainer", **overrides: Any) -> PodSpec:
    values: dict[str, Any] = {
        "namespace": "ml", "name": name, "uid": str(uuid.uuid4()), "container": "main", "image": "repo/train:1",
        "command": ("python", "-m", "train"),
    }  # fmt: skip
    values.update(overrides)
    return PodSpec(**values)


def request_for(pod: PodSpec, **overrides: Any) -> ProvisionRequest:
    return ProvisionRequest(claim=claim_name(pod.namespace, pod.name, pod.uid), **overrides)


def moto_instance(instance_id: str) -> Any:
    """moto's backend object for a Nebula instance id (`<region>/<i-...>`)."""
    parsed = parse_instance_id(instance_id)
    assert parsed is not None, instance_id
    region, ec2_id = parsed
    return ec2_backends[DEFAULT_ACCOUNT_ID][region].get_instance(ec2_id)


def serve_consoles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make moto's GetConsoleOutput answer with what `write_console` put on the instance
    (moto's own sample for an instance the test wrote nothing to)."""
    original: Callable[[General], ActionResult] = General.get_console_output

    def get_console_output(self: General) -> ActionResult:
        instance = self.ec2_backend.get_instance(self._get_param("InstanceId"))
        text = getattr(instance, _CONSOLE, None)
        if text is None:
            return original(self)
        if isinstance(text, Path):  # a booted VM's console file (tests/providers/aws/ec2_vms.py)
            text = text.read_bytes()[-CONSOLE_WINDOW:].decode(errors="replace")
        return ActionResult(
            {"InstanceId": instance.id, "Timestamp": utcnow(), "Output": Base64EncodedString.from_raw_string(text)}
        )

    monkeypatch.setattr(General, "get_console_output", get_console_output)


def write_console(instance_id: str, text: str) -> None:
    """The VM's serial console now holds `text` (its last 64 KiB, as EC2 would serve it)."""
    setattr(moto_instance(instance_id), _CONSOLE, text)


def attach_console(instance: Any, path: Path) -> None:
    """moto's `instance` serves, at each GetConsoleOutput, the last 64 KiB of the file `path`."""
    setattr(instance, _CONSOLE, path)


def set_state(instance_id: str, name: str, *, reason: tuple[str, str], transition: str = "") -> None:
    """EC2 shows the instance in state `name` with StateReason `reason` (code, message)."""
    instance = moto_instance(instance_id)
    instance._state.name = name
    instance._state.code = STATE_CODES[name]
    instance.state_reason.code, instance.state_reason.message = reason
    instance._reason = transition


def console_of_a_run(code: int, *, lines: tuple[str, ...] = ("epoch 1", "epoch 2")) -> str:
    """What the user-data puts on the console for a workload that printed `lines` and exited
    with `code`: boot noise, Docker-stamped workload lines, the script's words and marker."""
    stamped = "".join(f"2026-12-01T10:00:0{i}.000000000Z {line}\r\n" for i, line in enumerate(lines))
    return (
        "[    0.000000] Linux version 6.1.0 (builder@amazon)\r\n"
        "cloud-init: running user-data\r\n"
        f"{stamped}"
        f"nebula: workload exited with code {code}\r\n"
        f"NEBULA-EXIT-CODE={code}\r\n"
        "[  300.000000] reboot: Power down\r\n"
    )


def workload_exits(instance_id: str, code: int, *, state: str = "shutting-down") -> None:
    """The workload exited with `code`; user-data wrote the marker and shut the VM down."""
    write_console(instance_id, console_of_a_run(code))
    set_state(instance_id, state, reason=SHUTDOWN)


def count_calls(provider: AwsProvider, region: str = "us-east-1") -> Counter[str]:
    """Every EC2 operation the provider's client sends from now on, by name (live counts)."""
    seen: Counter[str] = Counter()

    def record(**kwargs: Any) -> None:
        seen[kwargs["model"].name] += 1  # a before-call hook must return None

    provider._ec2.client(region).meta.events.register("before-call.ec2", record)
    return seen


def forget(instance_id: str) -> None:
    """EC2 no longer shows the instance (it does so about an hour after it terminated)."""
    parsed = parse_instance_id(instance_id)
    assert parsed is not None
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][parsed[0]]
    for reservation_id, reservation in list(backend.reservations.items()):
        reservation.instances = [i for i in reservation.instances if i.id != parsed[1]]
        if not reservation.instances:
            del backend.reservations[reservation_id]
