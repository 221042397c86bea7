"""EC2's view of an instance turned into the seam's `Instance` facts, and Nebula's tags.

Called by `AwsProvider` for get and list (through `inventory`). Pure. EC2 knows the machine,
not the container: `running` is RUNNING; the workload's end shows as the instance shutting
down (user-data does that when `terminate_on_exit`), and its exit code is what the serial
console's marker said (`exits.ConsoleVerdict`, read by `exits.ExitReader`); a running
instance whose marker was read (its workload was stopped) has ended already.
Tests: tests/providers/aws/test_aws_exits.py, tests/providers/aws/test_aws_owner.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from datetime import UTC, datetime
from typing import Any

from providers import base
from providers.aws import containers

TAG_CLAIM = "nebula.io/claim"
TAG_MANAGED = "nebula.io/managed"
TAG_PROVIDER = "nebula.io/provider"
TAG_OWNER = "nebula.io/owner"  # `Owner.key`: `<cluster>.<alias>`
TAG_NAMESPACE = "nebula.io/pod-namespace"
TAG_POD = "nebula.io/pod-name"
TAG_UID = "nebula.io/pod-uid"
TAG_HOST_KEY = "nebula.io/ssh-host-key"

ADOPTABLE_STATES = frozenset({"pending", "running"})  # provision adopts only these
TRANSITIONAL_STATES = frozenset({"shutting-down", "stopping"})
FINAL_STATES = frozenset({"stopped", "terminated"})
FINISHED_STATES = TRANSITIONAL_STATES | FINAL_STATES  # the workload no longer runs
# StateReason codes of a Spot interruption (EC2 API reference, StateReason): terminated,
# or stopped for a persistent request with the stop behaviour.
SPOT_REASON_CODES = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})

_ID = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-\d)/(i-[0-9a-f]{8,17})$")
# StateTransitionReason: "User initiated (2024-05-01 10:00:00 GMT)"; moto says "UTC".
_TRANSITION_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


@dataclass(frozen=True)
class ConsoleVerdict:
    """What the serial console said about one finished instance, read once (see `exits`), or
    about a running one with several containers, read on each look.

    `exit_code` None: no marker. `state` is the EC2 state when it was read; `read_at` stands
    in for the end time when EC2 gives none; `note` says why the console could not be read;
    `events`: each container's last marker (several containers)."""

    exit_code: int | None
    state: str
    read_at: datetime
    note: str = ""
    events: Mapping[str, containers.ContainerEvent] = field(default_factory=dict)


def instance_id(region: str, ec2_id: str) -> base.InstanceId:
    """Nebula's id for an EC2 instance: the region travels with it, so get needs one call."""
    return base.InstanceId(f"{region}/{ec2_id}")


def parse_instance_id(text: str) -> tuple[str, str] | None:
    """(region, EC2 id), or None if `text` is not an id this provider made."""
    match = _ID.match(text)
    return (match.group(1), match.group(2)) if match else None


def tags_of(data: dict[str, Any]) -> dict[str, str]:
    return {str(tag.get("Key")): str(tag.get("Value", "")) for tag in data.get("Tags") or ()}


def is_owned(data: dict[str, Any], owner_key: str) -> bool:
    """The instance carries this owner's tag and a claim (Nebula made it for this owner)."""
    tags = tags_of(data)
    return tags.get(TAG_OWNER) == owner_key and bool(tags.get(TAG_CLAIM))


def state_of(data: dict[str, Any]) -> str:
    return str((data.get("State") or {}).get("Name") or "")


def endpoint_of(data: dict[str, Any]) -> str | None:
    """The public DNS name, else the public IP, else the private DNS name, else the private IP."""
    for key in ("PublicDnsName", "PublicIpAddress", "PrivateDnsName", "PrivateIpAddress"):
        value = data.get(key)
        if value:
            return str(value)
    return None


def transition_time(data: dict[str, Any]) -> datetime | None:
    """When EC2 says the last state change happened (StateTransitionReason), if it says."""
    match = _TRANSITION_TIME.search(str(data.get("StateTransitionReason") or ""))
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) if match else None


def _aware(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _reason(data: dict[str, Any]) -> tuple[str, str]:
    reason = data.get("StateReason") or {}
    return str(reason.get("Code") or ""), str(reason.get("Message") or "")


def instance_from(data: dict[str, Any], region: str, verdict: ConsoleVerdict | None = None) -> base.Instance:
    """Facts for one DescribeInstances entry of ours, with its containers' facts when its tags
    name several (`containers.with_containers`); see `_machine_facts`."""
    facts = _machine_facts(data, region, verdict)
    entries = containers.roster_of(tags_of(data))
    if not entries:
        if facts.state is base.InstanceState.RUNNING and verdict is not None and verdict.exit_code is not None:
            return _ended_workload(facts, verdict.exit_code, verdict.read_at)  # stopped; the shutdown is to come
        return facts
    events = verdict.events if verdict is not None else {}
    code = verdict.exit_code if verdict is not None and state_of(data) == "running" else None
    return containers.with_containers(facts, entries, events, workload_code=code)


def has_containers(data: dict[str, Any]) -> bool:
    """The instance's tags name several containers (its console is read while it runs)."""
    return containers.TAG_CONTAINERS in tags_of(data)


def _machine_facts(data: dict[str, Any], region: str, verdict: ConsoleVerdict | None) -> base.Instance:
    """Facts for one DescribeInstances entry of ours (the caller checked `is_owned`).

    A finished instance (shutting down, stopped, terminated) whose console carries the exit
    marker is SUCCEEDED or FAILED with that code. Without a marker: a Spot interruption is
    TERMINATED and preempted; an instance still shutting down is TERMINATING; a stopped or
    terminated one is TERMINATED with EC2's reason (someone, or Nebula's terminate, ended it).
    """
    state_name = state_of(data)
    launched = _aware(data.get("LaunchTime"))
    known = base.Instance(
        id=instance_id(region, str(data["InstanceId"])),
        claim=base.ClaimName(tags_of(data)[TAG_CLAIM]),
        state=base.InstanceState.PROVISIONING,
        created_at=launched,
        region=region,
        capacity_type=base.Tier.SPOT if data.get("InstanceLifecycle") == "spot" else base.Tier.ON_DEMAND,
    )
    if state_name == "pending":  # capacity is held; the machine boots
        return _replace(known, state=base.InstanceState.INITIALIZING, endpoint=endpoint_of(data))
    if state_name == "running":
        return _replace(known, state=base.InstanceState.RUNNING, endpoint=endpoint_of(data), started_at=launched)
    if state_name not in FINISHED_STATES:
        return known
    return _finished(known, data, state_name, verdict)


def _finished(
    known: base.Instance, data: dict[str, Any], state_name: str, verdict: ConsoleVerdict | None
) -> base.Instance:
    code, text = _reason(data)
    ended = transition_time(data) or (verdict.read_at if verdict else None)
    if verdict is not None and verdict.exit_code is not None:
        return _ended_workload(known, verdict.exit_code, ended)
    why = f"{code}: {text}" if code and text and not text.startswith(code) else (text or code)
    if verdict is not None and verdict.note:
        why = f"{why} ({verdict.note})" if why else verdict.note
    if verdict is None:  # the console is not read yet: nothing is decided
        return _replace(known, state=base.InstanceState.TERMINATING, started_at=known.created_at, message=why)
    if code in SPOT_REASON_CODES:
        return _replace(
            known,
            state=base.InstanceState.TERMINATED,
            preempted=True,
            started_at=known.created_at,
            finished_at=ended,
            message=f"EC2 reclaimed the Spot instance: {why}",
        )
    if state_name in TRANSITIONAL_STATES:
        return _replace(known, state=base.InstanceState.TERMINATING, started_at=known.created_at, message=why)
    default = "the instance was stopped outside Nebula" if state_name == "stopped" else "the instance was terminated"
    return _replace(
        known,
        state=base.InstanceState.TERMINATED,
        started_at=known.created_at,
        finished_at=ended,
        message=why or default,
    )


def _ended_workload(known: base.Instance, exit_code: int, ended: datetime | None) -> base.Instance:
    """The workload's marker said it exited with `exit_code` (at `ended`, if known)."""
    return _replace(
        known,
        state=base.InstanceState.SUCCEEDED if exit_code == 0 else base.InstanceState.FAILED,
        exit_code=exit_code,
        exit_reason="Completed" if exit_code == 0 else "Error",
        started_at=known.created_at,
        finished_at=ended,
        message=f"the workload exited with code {exit_code}",
    )
