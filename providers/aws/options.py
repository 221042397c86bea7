"""The AWS provider's options (the `OPTIONS` of its settings entry), parsed and checked.

Called by `AwsProvider.__init__`: parsing only, no I/O (the key file is read on first
use). Unknown keys are errors so typos surface at start-up; credentials are never
options (boto3 finds them: environment, profile, instance role).
Tests: tests/providers/aws/test_aws.py, tests/providers/aws/test_aws_notices.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_REGIONS = ("us-east-1",)
MAX_VISIBILITY = 12 * 60 * 60  # SQS's largest VisibilityTimeout
KNOWN_KEYS = frozenset(
    {
        "regions",
        "ami",
        "subnet",
        "security_groups",
        "instance_profile",
        "root_volume_gib",
        "ssh",
        "ssh_user",
        "ssh_port",
        "ssh_key_file",
        "terminate_on_exit",
        "endpoint_url",
        "profile",
        "poll_interval",
        "connect_timeout",
        "read_timeout",
        "max_attempts",
        "spot_price_ttl",
        "interruption_queue",
        "interruption_visibility",
    }
)


@dataclass(frozen=True)
class AwsOptions:
    regions: tuple[str, ...]
    ami: Mapping[str, str]  # region -> AMI id; "*" for every region
    subnet: Mapping[str, str] = field(default_factory=dict)  # region -> subnet id; "*" for every region
    security_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    instance_profile: str | None = None
    root_volume_gib: int | None = None
    ssh: bool = True  # logs and exec over SSH when the instance has an endpoint
    ssh_user: str = "ec2-user"
    ssh_port: int = 22
    ssh_key_file: str | None = None  # the operator key Nebula itself logs in with
    terminate_on_exit: bool = True  # the instance shuts down (and so terminates) after the workload
    endpoint_url: str | None = None
    profile: str | None = None
    poll_interval: float = 15.0
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    max_attempts: int = 3
    spot_price_ttl: float = 600.0
    # The SQS queue (URL or name) EventBridge feeds EC2's interruption notices into; None: no
    # notices (`notices.NoticeReader`). A notice read and not acked shows again after
    # `interruption_visibility` seconds (SQS's VisibilityTimeout, whole seconds, <= 12 h).
    interruption_queue: str | None = None
    interruption_visibility: int = 60

    def for_region(self, values: Mapping[str, Any], region: str) -> Any:
        """The per-region value of a region mapping (`"*"` is the default), or None."""
        return values.get(region, values.get("*"))


def _per_region(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        return {"*": value}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    raise ValueError(f"aws option {key!r} is a string or a mapping of region to value")


def _groups(value: Any) -> dict[str, tuple[str, ...]]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        value = {"*": value}
    return {
        region: tuple([groups] if isinstance(groups, str) else groups)
        for region, groups in _per_region(value, "security_groups").items()
    }


def _number(options: Mapping[str, Any], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"aws option {key!r} must be a number")
    if value <= 0:
        raise ValueError(f"aws option {key!r} must be positive")
    return float(value)


def parse_options(options: Mapping[str, Any]) -> AwsOptions:
    """Validate `options`; ValueError names what is wrong."""
    unknown = sorted(set(options) - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown option(s) for the aws provider: {', '.join(unknown)}")
    regions = options.get("regions", DEFAULT_REGIONS)
    if isinstance(regions, str) or not isinstance(regions, Sequence) or not regions:
        raise ValueError("aws option 'regions' is a non-empty list such as ['us-east-1']")
    ami = _per_region(options.get("ami"), "ami")
    if not ami:
        raise ValueError("aws option 'ami' is required: an AMI id, or a mapping of region to AMI id")
    for key in ("ssh", "terminate_on_exit"):
        if not isinstance(options.get(key, True), bool):
            raise ValueError(f"aws option {key!r} is true or false")
    root = options.get("root_volume_gib")
    if root is not None and (isinstance(root, bool) or not isinstance(root, int) or root <= 0):
        raise ValueError("aws option 'root_volume_gib' is a positive integer")
    queue = options.get("interruption_queue")
    if queue is not None and (not isinstance(queue, str) or not queue.strip()):
        raise ValueError("aws option 'interruption_queue' is an SQS queue URL or name")
    visibility = _number(options, "interruption_visibility", 60)
    if visibility != int(visibility) or visibility > MAX_VISIBILITY:
        raise ValueError(f"aws option 'interruption_visibility' is whole seconds, at most {MAX_VISIBILITY}")
    return AwsOptions(
        regions=tuple(dict.fromkeys(str(region) for region in regions)),
        ami={region: str(value) for region, value in ami.items()},
        subnet={region: str(value) for region, value in _per_region(options.get("subnet"), "subnet").items()},
        security_groups=_groups(options.get("security_groups")),
        instance_profile=options.get("instance_profile"),
        root_volume_gib=root,
        ssh=bool(options.get("ssh", True)),
        ssh_user=str(options.get("ssh_user", "ec2-user")),
        ssh_port=int(_number(options, "ssh_port", 22)),
        ssh_key_file=options.get("ssh_key_file"),
        terminate_on_exit=bool(options.get("terminate_on_exit", True)),
        endpoint_url=options.get("endpoint_url"),
        profile=options.get("profile"),
        poll_interval=_number(options, "poll_interval", 15.0),
        connect_timeout=_number(options, "connect_timeout", 10.0),
        read_timeout=_number(options, "read_timeout", 30.0),
        max_attempts=int(_number(options, "max_attempts", 3)),
        spot_price_ttl=_number(options, "spot_price_ttl", 600.0),
        interruption_queue=queue.strip() if queue is not None else None,
        interruption_visibility=int(visibility),
    )
