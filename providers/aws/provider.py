"""`AwsProvider`: EC2 instances run Pods (one instance per claim), with SSH logs and exec.

Built by `providers.registry` from settings (`providers.aws.AwsProvider`); called by the
vnode and the kubelet API. Idempotency is ours, not EC2's ClientToken alone: provision
describes by the claim tag first. boto3 is reached only through `providers.aws.ec2`;
user-data and keys are never logged.
Tests: tests/providers/aws/test_aws.py.
"""

from __future__ import annotations

import builtins
import hashlib
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from providers import ssh
from providers.aws import catalog, console, remote, status
from providers.aws.classify import classify
from providers.aws.ec2 import SPOT_PRICE_CODES, CapacityRefusal, Ec2, error_code
from providers.aws.keys import OperatorKey, generate_key_pair
from providers.aws.options import AwsOptions, parse_options
from providers.aws.pricing import SpotPrices
from providers.aws.userdata import Boot, render_user_data
from providers.base import (
    BlockScope,
    Capabilities,
    ConnectCredential,
    Executor,
    Instance,
    InstanceId,
    LogOptions,
    LogStream,
    LogStreamer,
    Offering,
    PodSpec,
    Process,
    Provider,
    ProvisionRequest,
    ProvisionResult,
    Tier,
)
from providers.errors import InvalidRequest, NoCapacity, NotFound, NotSupported, ProviderError, Unavailable
from providers.owner import Owner

logger = logging.getLogger(__name__)

REGION_GROUPS = ("us", "eu", "ap", "ca", "sa", "me", "af", "il", "mx")
ALL_REGIONS = frozenset({"*", "any", "all"})
NODE_CAPACITY = {"cpu": "10000", "memory": "100Ti", "pods": "1000", "nvidia.com/gpu": "1000"}


class AwsProvider:
    """Runs each Pod's first container on its own EC2 instance. Options: see `options.AwsOptions`."""

    def __init__(self, name: str, options: Mapping[str, Any] | None = None, *, owner: Owner | None = None) -> None:
        self._name = name
        self._owner = owner or Owner.standalone(name)
        self._options: AwsOptions = parse_options(options or {})
        self._ec2 = Ec2(self._options)
        self._operator = OperatorKey(self._options.ssh_key_file)
        self._locks_guard = threading.Lock()
        self._claim_locks: dict[str, threading.Lock] = {}
        self._spot = SpotPrices(self._ec2, ttl=self._options.spot_price_ttl)

    @property
    def name(self) -> str:
        return self._name

    @property
    def owner(self) -> Owner:
        return self._owner

    @property
    def options(self) -> AwsOptions:
        return self._options

    def capabilities(self) -> Capabilities:
        return Capabilities(
            poll_interval=self._options.poll_interval,
            list_lag=10.0,  # DescribeInstances is eventually consistent after RunInstances
            tiers=(Tier.ON_DEMAND, Tier.SPOT),
            regions=self._options.regions,
            capacity=dict(NODE_CAPACITY),
            pulls_images=True,
            log_timestamps=True,
        )

    # -- provision --------------------------------------------------------------------
    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        """Adopt the claim's instance if it exists, else launch one (see the module doc).

        Steps: pick the region and instance types (primary first), describe by the claim
        tag, render user-data with fresh keys, RunInstances on each type in turn while EC2
        says it has no capacity for it, return the private key once.
        """
        region = self._region_for(request)
        tier = request.capacity_type or Tier.ON_DEMAND
        if not pod.image:
            raise InvalidRequest("the Pod's first container has no image")
        choices = self._instance_types(pod, region)
        ami = self._options.for_region(self._options.ami, region)
        if not ami:
            raise InvalidRequest(f"the aws provider has no AMI configured for {region}")
        with self._claim_lock(request.claim):
            existing = self._find_claim(region, request.claim)
            if existing is not None:
                return ProvisionResult(existing.id, reserved=True, credential=None, endpoint=existing.endpoint)
            user_key = generate_key_pair(f"nebula-{request.claim}")
            host_key = generate_key_pair()
            boot = Boot(
                claim=request.claim, ssh_user=self._options.ssh_user, host_key=host_key.private_openssh,
                authorized_keys=(user_key.public_line, self._operator.get().public_line),
                gpus=choices[0].gpu_count > 0, terminate_on_exit=self._options.terminate_on_exit,
            )  # fmt: skip
            user_data = render_user_data(pod, request.env, boot)
            tags = self._tags(pod, request, host_key.public_line)
            data = self._launch(
                region, choices, tier, ami, user_data, tags, claim=request.claim, secrets=list(request.env.values())
            )
        logger.info("launched %s for claim %s in %s (%s, %s)", data["InstanceId"], request.claim, region,
                    data.get("InstanceType"), tier.value)  # fmt: skip
        credential = ConnectCredential(
            {
                "ssh-privatekey": user_key.private_openssh,
                "username": self._options.ssh_user.encode(),
                "ssh-host-key": host_key.public_line.encode(),
            }
        )
        return ProvisionResult(
            status.instance_id(region, str(data["InstanceId"])), reserved=True, credential=credential,
            endpoint=status.endpoint_of(data),
        )  # fmt: skip

    def _region_for(self, request: ProvisionRequest) -> str:
        if not request.region:
            return self._options.regions[0]
        expanded = self.expand_regions([request.region])
        if not expanded:
            raise InvalidRequest(f"the aws provider does not serve region {request.region!r}")
        return expanded[0]

    def _instance_types(self, pod: PodSpec, region: str) -> list[catalog.CatalogEntry]:
        entries = catalog.load_catalog()
        found = catalog.candidates(
            entries, accelerator=pod.accelerator, gpu_count=pod.gpu_count, region=region, cpu=pod.cpu,
            memory_bytes=pod.memory,
        )  # fmt: skip
        if found:
            return found
        wanted = catalog.canonical_accelerator(pod.accelerator)
        what = f"{max(pod.gpu_count, 1)} x {wanted}" if wanted else "a CPU-only instance"
        if any(e.accelerator == wanted for e in entries):
            raise NoCapacity(f"no instance type in {region} offers {what} with the requested cpu and memory")
        raise InvalidRequest(f"the aws provider sells no instance type with {what}")

    def _tags(self, pod: PodSpec, request: ProvisionRequest, host_key: str) -> list[dict[str, str]]:
        values = {
            "Name": f"nebula-{request.claim}",
            status.TAG_CLAIM: request.claim,
            status.TAG_MANAGED: "true",
            status.TAG_PROVIDER: self._name,
            status.TAG_NAMESPACE: pod.namespace,
            status.TAG_POD: pod.name,
            status.TAG_UID: pod.uid,
            status.TAG_HOST_KEY: " ".join(host_key.split()[:2]),
        }
        return [{"Key": key, "Value": value[:256]} for key, value in values.items()]

    def _launch(
        self,
        region: str,
        choices: Sequence[catalog.CatalogEntry],
        tier: Tier,
        ami: str,
        user_data: bytes,
        tags: list[dict[str, str]],
        *,
        claim: str,
        secrets: Sequence[str],
    ) -> dict[str, Any]:
        """RunInstances on each instance type in turn; a capacity refusal moves to the next."""
        refusal: CapacityRefusal | None = None
        for entry in choices:
            try:
                params = self._run_params(region, entry, tier, ami, user_data, tags, claim=claim)
                result = self._ec2.call(region, "run_instances", secrets=secrets, **params)
                return dict(result["Instances"][0])
            except CapacityRefusal as exc:
                if error_code(exc) in SPOT_PRICE_CODES:
                    raise
                refusal = exc
        assert refusal is not None
        raise refusal

    def _run_params(
        self, region: str, entry: catalog.CatalogEntry, tier: Tier, ami: str, user_data: bytes,
        tags: list[dict[str, str]], *, claim: str,
    ) -> dict[str, Any]:  # fmt: skip
        params: dict[str, Any] = {
            "ImageId": ami,
            "InstanceType": entry.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": user_data,
            # EC2's own idempotency for a retry racing describe's eventual consistency; one
            # token per (claim, type) because a token reused with other parameters is an error.
            "ClientToken": hashlib.sha256(f"{claim}/{entry.instance_type}".encode()).hexdigest()[:64],
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "volume", "Tags": [t for t in tags if t["Key"] != status.TAG_HOST_KEY]},
            ],
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        }
        if self._options.terminate_on_exit:
            params["InstanceInitiatedShutdownBehavior"] = "terminate"
        if tier is Tier.SPOT:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        subnet = self._options.for_region(self._options.subnet, region)
        if subnet:
            params["SubnetId"] = subnet
        groups = self._options.for_region(self._options.security_groups, region)
        if groups:
            params["SecurityGroupIds"] = list(groups)
        profile = self._options.instance_profile
        if profile:
            params["IamInstanceProfile"] = {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
        if self._options.root_volume_gib:
            params["BlockDeviceMappings"] = [
                {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": self._options.root_volume_gib, "VolumeType": "gp3",
                                                    "DeleteOnTermination": True}}
            ]  # fmt: skip
        return params

    def _claim_lock(self, claim: str) -> threading.Lock:
        with self._locks_guard:
            return self._claim_locks.setdefault(claim, threading.Lock())

    def _find_claim(self, region: str, claim: str) -> Instance | None:
        pages = self._ec2.pages(region, "describe_instances", Filters=self._filters(claim=claim))
        return next(_instances(pages, region), None)

    def _filters(self, *, claim: str | None = None) -> list[dict[str, Any]]:
        filters = [
            {"Name": f"tag:{status.TAG_MANAGED}", "Values": ["true"]},
            {"Name": f"tag:{status.TAG_PROVIDER}", "Values": [self._name]},
            {"Name": "instance-state-name", "Values": list(status.LIVE_STATES)},
        ]
        if claim is not None:
            filters.append({"Name": f"tag:{status.TAG_CLAIM}", "Values": [claim]})
        return filters

    # -- observe and terminate ------------------------------------------------------------
    def _describe(self, instance_id: str) -> tuple[str, dict[str, Any]] | None:
        """(region, EC2 data) of one of our instances, or None if it is not (or no longer) there."""
        parsed = status.parse_instance_id(instance_id)
        if parsed is None or parsed[0] not in self._options.regions:
            return None
        region, ec2_id = parsed
        try:
            result = self._ec2.call(region, "describe_instances", InstanceIds=[ec2_id])
        except NotFound:
            return None
        for reservation in result.get("Reservations") or ():
            for data in reservation.get("Instances") or ():
                if status.tags_of(data).get(status.TAG_PROVIDER) == self._name:
                    return region, data
        return None

    def get(self, instance_id: InstanceId) -> Instance | None:
        found = self._describe(instance_id)
        return status.instance_from(found[1], found[0]) if found else None

    def terminate(self, instance_id: InstanceId) -> None:
        found = self._describe(instance_id)
        if found is None or (found[1].get("State") or {}).get("Name") == "terminated":
            return
        region, data = found
        try:
            self._ec2.call(region, "terminate_instances", InstanceIds=[data["InstanceId"]])
        except NotFound:
            return
        logger.info("terminating %s (claim %s)", instance_id, status.tags_of(data).get(status.TAG_CLAIM))

    def list(self) -> list[Instance]:
        """One paginated DescribeInstances per region, all regions at once; any failure fails the list."""
        regions = self._options.regions
        with ThreadPoolExecutor(max_workers=len(regions), thread_name_prefix=f"aws-list-{self._name}") as pool:
            pages = list(pool.map(self._list_region, regions))
        return [instance for found in pages for instance in found]

    def _list_region(self, region: str) -> builtins.list[Instance]:
        pages = self._ec2.pages(
            region, "describe_instances", Filters=self._filters(), PaginationConfig={"PageSize": 1000}
        )
        return builtins.list(_instances(pages, region))

    # -- offerings and regions ----------------------------------------------------------------
    def offerings(self) -> builtins.list[Offering]:
        entries = catalog.load_catalog()
        regions = self._options.regions
        with ThreadPoolExecutor(max_workers=len(regions), thread_name_prefix=f"aws-spot-{self._name}") as pool:
            spot = dict(zip(regions, pool.map(self._spot_prices_in, regions), strict=True))
        result = []
        for region in regions:
            for entry in catalog.primaries(entries, region):
                result.append(Offering(entry.accelerator, entry.gpu_count, Tier.ON_DEMAND, region,
                                       entry.on_demand_price, True, entry.instance_type))  # fmt: skip
                result.append(Offering(entry.accelerator, entry.gpu_count, Tier.SPOT, region,
                                       spot[region].get(entry.instance_type), True, entry.instance_type))  # fmt: skip
        return result

    def _spot_prices_in(self, region: str) -> dict[str, float]:
        types = [entry.instance_type for entry in catalog.primaries(catalog.load_catalog(), region)]
        return self._spot.in_region(region, types)

    def expand_regions(self, declared: Sequence[str]) -> builtins.list[str]:
        """`us`, `eu`, `ap`... name the provider's regions in that group; `*` all; others as is if served."""
        result: builtins.list[str] = []
        for token in declared:
            word = token.strip().lower()
            if word in ALL_REGIONS:
                matches = builtins.list(self._options.regions)
            elif word in REGION_GROUPS:
                matches = [region for region in self._options.regions if region.startswith(f"{word}-")]
            else:
                matches = [word] if word in self._options.regions else []
            result.extend(region for region in matches if region not in result)
        return result

    def classify_provision_error(
        self, err: ProviderError, *, accelerator: str | None, tier: Tier | None, region: str | None
    ) -> BlockScope:
        return classify(self._name, err, accelerator=accelerator, tier=tier, region=region)

    # -- logs and exec ----------------------------------------------------------------------
    def logs(self, instance_id: InstanceId, options: LogOptions) -> LogStream:
        if options.previous:
            raise NotSupported("an EC2 instance runs its workload once: there is no previous log")
        region, data = self._live(instance_id)
        endpoint = status.endpoint_of(data)
        if self._options.ssh and endpoint:
            try:
                target = remote.ssh_target(data, endpoint, self._options, self._operator.get())
                return ssh.open_log_stream(target, remote.WORKLOAD_LOG, options)
            except Unavailable as exc:
                if options.timestamps or options.since is not None:
                    raise
                logger.info("logs of %s from the serial console: %s", instance_id, exc)
        if options.timestamps or options.since is not None:
            raise NotSupported("the serial console carries no timestamps: timestamps and since need SSH")
        ec2_id = str(data["InstanceId"])
        return console.ConsoleLogStream(
            lambda: self._console(instance_id, region, ec2_id), options, poll_seconds=self._options.poll_interval
        )

    def _console(self, instance_id: InstanceId, region: str, ec2_id: str) -> bytes | None:
        if self.get(instance_id) is None:
            return None
        try:
            result = self._ec2.call(region, "get_console_output", InstanceId=ec2_id)
        except NotFound:
            return None
        return console.decode_console(result.get("Output"))

    def exec(self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool) -> Process:
        if not command:
            raise NotSupported("exec needs a command")
        _, data = self._live(instance_id)
        if (data.get("State") or {}).get("Name") != "running":
            raise NotFound(f"instance {instance_id} is not running")
        endpoint = status.endpoint_of(data)
        if not self._options.ssh or not endpoint:
            raise NotSupported(
                f"instance {instance_id} has no SSH endpoint (the aws option 'ssh' is off, or no address)"
            )
        target = remote.ssh_target(data, endpoint, self._options, self._operator.get())
        return ssh.start_process(target, remote.exec_argv(command, tty=tty, stdin=stdin), tty=tty, stdin=stdin)

    def _live(self, instance_id: InstanceId) -> tuple[str, dict[str, Any]]:
        found = self._describe(instance_id)
        if found is None or status.instance_from(found[1], found[0]) is None:
            raise NotFound(f"no aws instance {instance_id}")
        return found


def _conforms(provider: AwsProvider) -> tuple[Provider, LogStreamer, Executor]:
    """mypy proves here, once, that AwsProvider satisfies the seam's protocols."""
    return provider, provider, provider


def _instances(pages: Sequence[Mapping[str, Any]], region: str) -> Iterator[Instance]:
    """Our instances in DescribeInstances pages (pages > reservations > instances)."""
    for page in pages:
        for reservation in page.get("Reservations") or ():
            for data in reservation.get("Instances") or ():
                instance = status.instance_from(data, region)
                if instance is not None:
                    yield instance
