"""EC2's view of an instance turned into the seam's `Instance` facts, and Nebula's tags.

Called by `AwsProvider` for get and list. Pure. EC2 knows the machine, not the
container: `running` is RUNNING, and the workload's end shows as the instance shutting
down (user-data does that when `terminate_on_exit`), so no exit code is reported.
Tests: tests/providers/aws/test_aws.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from providers.base import ClaimName, Instance, InstanceId, InstanceState, Tier

TAG_CLAIM = "nebula.io/claim"
TAG_MANAGED = "nebula.io/managed"
TAG_PROVIDER = "nebula.io/provider"
TAG_NAMESPACE = "nebula.io/pod-namespace"
TAG_POD = "nebula.io/pod-name"
TAG_UID = "nebula.io/pod-uid"
TAG_HOST_KEY = "nebula.io/ssh-host-key"
LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")

_STATES = {
    "pending": InstanceState.INITIALIZING,  # capacity is held; the machine boots
    "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.TERMINATING,
    "stopping": InstanceState.TERMINATING,
    "stopped": InstanceState.TERMINATED,  # our instances never stop themselves; someone else did
    "terminated": InstanceState.TERMINATED,
}
_ID = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-\d)/(i-[0-9a-f]{8,17})$")


def instance_id(region: str, ec2_id: str) -> InstanceId:
    """Nebula's id for an EC2 instance: the region travels with it, so get needs one call."""
    return InstanceId(f"{region}/{ec2_id}")


def parse_instance_id(text: str) -> tuple[str, str] | None:
    """(region, EC2 id), or None if `text` is not an id this provider made."""
    match = _ID.match(text)
    return (match.group(1), match.group(2)) if match else None


def tags_of(data: dict[str, Any]) -> dict[str, str]:
    return {str(tag.get("Key")): str(tag.get("Value", "")) for tag in data.get("Tags") or ()}


def endpoint_of(data: dict[str, Any]) -> str | None:
    """The public DNS name, else the public IP, else the private DNS name, else the private IP."""
    for key in ("PublicDnsName", "PublicIpAddress", "PrivateDnsName", "PrivateIpAddress"):
        value = data.get(key)
        if value:
            return str(value)
    return None


def _aware(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.now(UTC)


def instance_from(data: dict[str, Any], region: str) -> Instance | None:
    """Facts for one DescribeInstances entry; None if it is not one of ours or is gone."""
    tags = tags_of(data)
    claim = tags.get(TAG_CLAIM)
    state_name = str((data.get("State") or {}).get("Name") or "")
    if not claim or state_name == "terminated":
        return None
    state = _STATES.get(state_name, InstanceState.PROVISIONING)
    reason = (data.get("StateReason") or {}).get("Message") or ""
    if state_name == "stopped":
        reason = reason or "the instance was stopped outside Nebula"
    launched = _aware(data.get("LaunchTime"))
    return Instance(
        id=instance_id(region, str(data["InstanceId"])),
        claim=ClaimName(claim),
        state=state,
        created_at=launched,
        endpoint=endpoint_of(data) if state in (InstanceState.INITIALIZING, InstanceState.RUNNING) else None,
        started_at=launched if state is InstanceState.RUNNING else None,
        message=str(reason),
        region=region,
        capacity_type=Tier.SPOT if data.get("InstanceLifecycle") == "spot" else Tier.ON_DEMAND,
    )
