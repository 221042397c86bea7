"""Launching one instance for a claim: the instance types to try, the tags, the ClientToken
and the RunInstances parameters, and the walk down the types while EC2 has no capacity.

Called by `AwsProvider.provision` once it found no live instance for the claim. Builds
values and makes RunInstances calls through `ec2.Ec2` only; the user-data it is given holds
env values in clear text and is never logged here.
Tests: tests/providers/aws/test_aws.py, tests/providers/aws/test_aws_owner.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from providers import base
from providers.aws import catalog, containers, status
from providers.aws.ec2 import SPOT_PRICE_CODES, CapacityRefusal, Ec2, error_code
from providers.aws.options import AwsOptions
from providers.errors import InvalidRequest, NoCapacity
from providers.owner import Owner


def instance_types(pod: base.PodSpec, region: str) -> list[catalog.CatalogEntry]:
    """The catalog entries that serve the Pod in `region`, the primary first."""
    entries = catalog.load_catalog()
    found = catalog.candidates(
        entries,
        accelerator=pod.accelerator,
        gpu_count=pod.gpu_count,
        region=region,
        cpu=pod.cpu,
        memory_bytes=pod.memory,
    )
    if found:
        return found
    wanted = catalog.canonical_accelerator(pod.accelerator)
    what = f"{max(pod.gpu_count, 1)} x {wanted}" if wanted else "a CPU-only instance"
    if any(e.accelerator == wanted for e in entries):
        raise NoCapacity(f"no instance type in {region} offers {what} with the requested cpu and memory")
    raise InvalidRequest(f"the aws provider sells no instance type with {what}")


def tags(
    pod: base.PodSpec, request: base.ProvisionRequest, *, provider: str, owner: Owner, host_key: str
) -> list[dict[str, str]]:
    """The instance's tags: how list, get and the claim lookup find it, whose it is, and (for
    a Pod of several containers) which containers it runs."""
    values = {
        "Name": f"nebula-{request.claim}",
        status.TAG_CLAIM: request.claim,
        status.TAG_MANAGED: "true",
        status.TAG_PROVIDER: provider,
        status.TAG_OWNER: owner.key,
        status.TAG_NAMESPACE: pod.namespace,
        status.TAG_POD: pod.name,
        status.TAG_UID: pod.uid,
        status.TAG_HOST_KEY: " ".join(host_key.split()[:2]),
        **containers.roster_tags(containers.roster(pod)),
    }
    return [{"Key": key, "Value": value[:256]} for key, value in values.items()]


def client_token(claim: str, instance_type: str, *, earlier: Sequence[str], at: datetime) -> str:
    """EC2's idempotency token for one launch of `claim` on `instance_type`.

    A retry that races DescribeInstances' eventual consistency must send the same token (EC2
    then refuses a second launch); a replacement launch must not, since EC2 keeps a token for
    at least 24 hours after its instance terminated and would answer with the old instance.
    So the token names the claim's earlier instances that DescribeInstances still shows
    (`earlier`: for about an hour after they terminate) and the UTC hour of the launch (after
    that hour the earlier ones may have vanished from DescribeInstances, never from EC2's
    token memory). One token per type, because a token reused with other parameters is an error.
    """
    basis = "/".join([claim, instance_type, ",".join(sorted(earlier)), at.strftime("%Y-%m-%dT%H")])
    return hashlib.sha256(basis.encode()).hexdigest()[:64]


def run_params(
    options: AwsOptions,
    region: str,
    entry: catalog.CatalogEntry,
    tier: base.Tier,
    ami: str,
    user_data: bytes,
    instance_tags: list[dict[str, str]],
    *,
    token: str,
) -> dict[str, Any]:
    """RunInstances parameters for one instance of `entry`'s type."""
    params: dict[str, Any] = {
        "ImageId": ami,
        "InstanceType": entry.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "UserData": user_data,
        "ClientToken": token,
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": instance_tags},
            {"ResourceType": "volume", "Tags": [t for t in instance_tags if t["Key"] != status.TAG_HOST_KEY]},
        ],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
    }
    if options.terminate_on_exit:
        params["InstanceInitiatedShutdownBehavior"] = "terminate"
    if tier is base.Tier.SPOT:
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    subnet = options.for_region(options.subnet, region)
    if subnet:
        params["SubnetId"] = subnet
    groups = options.for_region(options.security_groups, region)
    if groups:
        params["SecurityGroupIds"] = list(groups)
    profile = options.instance_profile
    if profile:
        params["IamInstanceProfile"] = {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
    if options.root_volume_gib:
        params["BlockDeviceMappings"] = [
            {
                "DeviceName": "/dev/xvda",
                "Ebs": {"VolumeSize": options.root_volume_gib, "VolumeType": "gp3", "DeleteOnTermination": True},
            }
        ]
    return params


def launch(
    ec2: Ec2,
    options: AwsOptions,
    region: str,
    choices: Sequence[catalog.CatalogEntry],
    tier: base.Tier,
    ami: str,
    user_data: bytes,
    instance_tags: list[dict[str, str]],
    *,
    claim: str,
    earlier: Sequence[str],
    at: datetime,
    secrets: Sequence[str],
) -> dict[str, Any]:
    """RunInstances on each instance type in turn; a capacity refusal moves to the next
    (a Spot price refusal does not: it holds for every type)."""
    refusal: CapacityRefusal | None = None
    for entry in choices:
        token = client_token(claim, entry.instance_type, earlier=earlier, at=at)
        params = run_params(options, region, entry, tier, ami, user_data, instance_tags, token=token)
        try:
            result = ec2.call(region, "run_instances", secrets=secrets, **params)
            return dict(result["Instances"][0])
        except CapacityRefusal as exc:
            if error_code(exc) in SPOT_PRICE_CODES:
                raise
            refusal = exc
    assert refusal is not None
    raise refusal
