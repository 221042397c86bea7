"""`AwsProvider`: EC2 instances run Pods (one instance per claim), with SSH logs, exec and stop.

Built by `providers.registry` from settings (`providers.aws.AwsProvider`); called by the
vnode and the kubelet API. Idempotency is ours, not EC2's ClientToken alone: provision
describes by the claim and owner tags first. It sees only its owner's instances
(`inventory`), launches through `launch`, and reads exits from the console (`exits`).
boto3 is reached only through `providers.aws.ec2`; user-data and keys are never logged.
Tests: tests/providers/aws/test_aws.py, tests/providers/aws/test_aws_owner.py, tests/providers/aws/test_aws_stop.py,
tests/providers/aws/test_aws_notices.py.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from providers import base, claimlocks, ssh
from providers.aws import catalog, launch, logs, remote, status
from providers.aws.classify import classify
from providers.aws.ec2 import Ec2
from providers.aws.exits import ExitReader
from providers.aws.inventory import Inventory
from providers.aws.keys import OperatorKey, generate_key_pair
from providers.aws.notices import NoticeReader
from providers.aws.options import AwsOptions, parse_options
from providers.aws.pricing import SpotPrices
from providers.aws.userdata import Boot, render_user_data
from providers.egress import EgressMode
from providers.errors import InvalidRequest, NotFound, NotSupported, ProviderError, Unavailable
from providers.owner import Owned, Owner
from providers.shape import VOLUME_KINDS, Shapes
from providers.ssh import SshTarget
from providers.ssh import usage as ssh_usage
from providers.usage import Reading, UsageSampler, instance_usage

logger = logging.getLogger(__name__)

REGION_GROUPS = ("us", "eu", "ap", "ca", "sa", "me", "af", "il", "mx")
ALL_REGIONS = frozenset({"*", "any", "all"})
# Served with restarts by replacement (docs/providers/aws.md): a container's restart is a new
# instance, which runs every container again. Probes: exec over SSH, TCP and HTTP against
# the instance's address (its containers share the host's network).
SHAPES = Shapes(
    several_containers=True,
    init_containers=True,
    sidecars=True,
    probes=frozenset({"exec", "tcpSocket", "httpGet"}),
    volumes=frozenset(VOLUME_KINDS),
)
STOP_ANSWER_SECONDS = 30.0  # for the SSH command that starts a detached `docker stop` to answer
USER_DATA_LIMIT = 16384  # bytes EC2 accepts as user-data (before its base64)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class AwsProvider(Owned):
    """Runs each Pod's containers on its own EC2 instance. Options: see `options.AwsOptions`.
    `now` is the wall clock (an exit's time when EC2 gives none; the launch's hour)."""

    def __init__(
        self,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        owner: Owner | None = None,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._name = name
        self._owner = owner or Owner.standalone(name)
        self._options: AwsOptions = parse_options(options or {})
        self._now = now
        self._ec2 = Ec2(self._options)
        self._operator = OperatorKey(self._options.ssh_key_file)
        self._claim_locks = claimlocks.ClaimLocks()
        self._spot = SpotPrices(self._ec2, ttl=self._options.spot_price_ttl)
        self._exits = ExitReader(self._ec2, now=now)
        self._inventory = Inventory(self._ec2, self._options, self._owner, self._exits, name=name)
        self._usage = UsageSampler()  # one SSH read of an instance per interval, whatever the scrape rate
        self._notices = NoticeReader(self._ec2, self._options, self._owner, self._inventory.filters)

    @property
    def options(self) -> AwsOptions:
        return self._options

    def capabilities(self) -> base.Capabilities:
        return base.Capabilities(
            poll_interval=self._options.poll_interval,
            list_lag=10.0,  # DescribeInstances is eventually consistent after RunInstances
            tiers=(base.Tier.ON_DEMAND, base.Tier.SPOT),
            regions=self._options.regions,
            capacity=dict(base.UNBOUNDED_CAPACITY),
            pulls_images=True,
            log_timestamps=True,
            restarts_in_place=False,  # the VM is the container's sandbox: a restart is a new instance
            bills_after_exit=True,  # a VM bills until it is terminated
            # EC2 shows a terminated instance for about an hour, and its console with it.
            keeps_output_after_terminate=True,
            shapes=SHAPES,
            billing_starts=base.BillingStart.STARTED,  # EC2 bills from `running` (started_at = LaunchTime then)
        )

    # -- provision --------------------------------------------------------------------
    def provision(self, pod: base.PodSpec, request: base.ProvisionRequest) -> base.ProvisionResult:
        """Adopt the claim's live instance if there is one, else launch one (see the module doc).

        Steps: pick the region and instance types (primary first), describe this owner's
        instances of the claim (pending or running: adopt; any other state is an earlier run,
        named in the ClientToken), render user-data with fresh keys, RunInstances on each
        type in turn while EC2 says it has no capacity for it, return the private key once.
        """
        if request.egress.mode is not EgressMode.OPEN:  # no security group or firewall of ours yet
            mode = request.egress.mode.value
            raise NotSupported(f"spec.egress: {self._name} cannot enforce egress {mode}; only Open")
        region = self._region_for(request)
        tier = request.capacity_type or base.Tier.ON_DEMAND
        if not pod.image:
            raise InvalidRequest("the Pod's first container has no image")
        choices = launch.instance_types(pod, region)
        ami = self._options.for_region(self._options.ami, region)
        if not ami:
            raise InvalidRequest(f"the aws provider has no AMI configured for {region}")
        with self._claim_locks.held(request.claim):
            found = self._inventory.claim_instances(region, request.claim)
            live = [data for data in found if status.state_of(data) in status.ADOPTABLE_STATES]
            if live:
                adopted = status.instance_from(live[0], region)
                return base.ProvisionResult(adopted.id, reserved=True, credential=None, endpoint=adopted.endpoint)
            user_key = generate_key_pair(f"nebula-{request.claim}")
            host_key = generate_key_pair()
            boot = Boot(
                claim=request.claim,
                ssh_user=self._options.ssh_user,
                host_key=host_key.private_openssh,
                authorized_keys=(user_key.public_line, self._operator.get().public_line),
                gpus=choices[0].gpu_count > 0,
                terminate_on_exit=self._options.terminate_on_exit,
            )
            user_data = render_user_data(
                pod, request.env, boot, container_env=request.container_env, volumes=request.volumes
            )
            if len(user_data) > USER_DATA_LIMIT:
                raise InvalidRequest(
                    f"the Pod's boot script is {len(user_data)} bytes gzipped, more than EC2's user-data limit "
                    f"of {USER_DATA_LIMIT}: its volumes (spec.volumes) are too large for the aws provider"
                )
            tags = launch.tags(pod, request, provider=self._name, owner=self._owner, host_key=host_key.public_line)
            data = launch.launch(
                self._ec2,
                self._options,
                region,
                choices,
                tier,
                ami,
                user_data,
                tags,
                claim=request.claim,
                earlier=[str(d["InstanceId"]) for d in found],
                at=self._now(),
                secrets=_secrets(request),
            )
        logger.info(
            "launched %s for claim %s in %s (%s, %s)",
            data["InstanceId"],
            request.claim,
            region,
            data.get("InstanceType"),
            tier.value,
        )
        credential = base.ConnectCredential(
            {
                "ssh-privatekey": user_key.private_openssh,
                "username": self._options.ssh_user.encode(),
                "ssh-host-key": host_key.public_line.encode(),
            }
        )
        return base.ProvisionResult(
            status.instance_id(region, str(data["InstanceId"])),
            reserved=True,
            credential=credential,
            endpoint=status.endpoint_of(data),
        )

    def _region_for(self, request: base.ProvisionRequest) -> str:
        if not request.region:
            return self._options.regions[0]
        expanded = self.expand_regions([request.region])
        if not expanded:
            raise InvalidRequest(f"the aws provider does not serve region {request.region!r}")
        return expanded[0]

    # -- observe and terminate ------------------------------------------------------------
    def get(self, instance_id: base.InstanceId) -> base.Instance | None:
        """One DescribeInstances (and, once for a finished instance, GetConsoleOutput)."""
        found = self._inventory.describe(instance_id)
        return self._inventory.facts(*found) if found else None

    def terminate(self, instance_id: base.InstanceId) -> None:
        """TerminateInstances only for this owner's instance, and only if it is not already
        going: the one DescribeInstances checks the owner tag and the state."""
        found = self._inventory.describe(instance_id)
        if found is None or status.state_of(found[1]) in ("shutting-down", "terminated"):
            return
        region, data = found
        try:
            self._ec2.call(region, "terminate_instances", InstanceIds=[data["InstanceId"]])
        except NotFound:
            return
        logger.info("terminating %s (claim %s)", instance_id, status.tags_of(data).get(status.TAG_CLAIM))

    def list(self) -> builtins.list[base.Instance]:
        """This owner's instances in every region, terminated ones included while EC2 shows them."""
        return self._inventory.list()

    def notices(self, wait: float) -> builtins.list[base.Notice]:
        """EC2's interruption notices from the `interruption_queue` (none without one): `notices`."""
        return self._notices.notices(wait)

    def ack(self, notice: base.Notice) -> None:
        self._notices.ack(notice)

    # -- offerings and regions ----------------------------------------------------------------
    def offerings(self) -> builtins.list[base.Offering]:
        entries = catalog.load_catalog()
        regions = self._options.regions
        with ThreadPoolExecutor(max_workers=len(regions), thread_name_prefix=f"aws-spot-{self._name}") as pool:
            spot = dict(zip(regions, pool.map(self._spot_prices_in, regions), strict=True))
        result = []
        for region in regions:
            for entry in catalog.primaries(entries, region):
                result.append(
                    base.Offering(
                        entry.accelerator,
                        entry.gpu_count,
                        base.Tier.ON_DEMAND,
                        region,
                        entry.on_demand_price,
                        True,
                        entry.instance_type,
                    )
                )
                result.append(
                    base.Offering(
                        entry.accelerator,
                        entry.gpu_count,
                        base.Tier.SPOT,
                        region,
                        spot[region].get(entry.instance_type),
                        True,
                        entry.instance_type,
                    )
                )
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
        self, err: ProviderError, *, accelerator: str | None, tier: base.Tier | None, region: str | None
    ) -> base.BlockScope:
        return classify(self._name, err, accelerator=accelerator, tier=tier, region=region)

    # -- logs and exec ----------------------------------------------------------------------
    def logs(self, instance_id: base.InstanceId, options: base.LogOptions) -> base.LogStream:
        """Over SSH while the instance runs (and SSH reaches it), else from the serial console,
        which EC2 keeps while it shows the instance, terminated ones included."""
        if options.previous:
            raise NotSupported(
                "each run of an EC2 Pod is a new instance: the previous run was a different VM, "
                "and its log is not kept with this one"
            )
        region, data = self._owned(instance_id)
        where = remote.reach(data, options.container)
        endpoint = status.endpoint_of(data)
        if self._options.ssh and endpoint and status.state_of(data) == "running":
            try:
                target = remote.ssh_target(data, endpoint, self._options, self._operator.get())
                return ssh.open_log_stream(target, where.log, options)
            except Unavailable as exc:
                if options.timestamps or options.since is not None:
                    raise
                logger.info("logs of %s from the serial console: %s", instance_id, exc)
        if options.timestamps or options.since is not None:
            raise NotSupported("the serial console carries no timestamps: timestamps and since need SSH")
        ec2_id = str(data["InstanceId"])
        return logs.ConsoleLogStream(
            lambda: self._inventory.console(instance_id, region, ec2_id, where.console_prefix),
            options,
            poll_seconds=self._options.poll_interval,
        )

    def exec(
        self, instance_id: base.InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> base.Process:
        if not command:
            raise NotSupported("exec needs a command")
        _, data = self._owned(instance_id)
        where = remote.reach(data, container)
        target = self._running_target(instance_id, data)
        argv = remote.exec_argv(command, tty=tty, stdin=stdin, docker_name=where.docker_name)
        return ssh.start_process(target, argv, tty=tty, stdin=stdin)

    def port_forward(self, instance_id: base.InstanceId, port: int) -> base.PortConnection:
        """A `direct-tcpip` channel over SSH to 127.0.0.1:port on the VM, where the Pod's
        containers listen (they share the host's network)."""
        _, data = self._owned(instance_id)
        return ssh.open_forward(self._running_target(instance_id, data), port)

    def _running_target(self, instance_id: base.InstanceId, data: dict[str, Any]) -> SshTarget:
        """Where to log in to a running instance, for exec and port-forward. NotFound: not
        running; NotSupported: no SSH endpoint (the `ssh` option off, or no address)."""
        if status.state_of(data) != "running":
            raise NotFound(f"instance {instance_id} is not running")
        endpoint = status.endpoint_of(data)
        if not self._options.ssh or not endpoint:
            raise NotSupported(
                f"instance {instance_id} has no SSH endpoint (the aws option 'ssh' is off, or no address)"
            )
        return remote.ssh_target(data, endpoint, self._options, self._operator.get())

    def stop_container(self, instance_id: base.InstanceId, container: str, *, grace: float) -> None:
        """A detached `docker stop -t <grace>` (`docker kill` for 0) over SSH: returns once
        asked. The container's exit (143, 137 or its own code) then shows in its console
        marker, which `get`/`list` read from now on while the instance runs (`exits.watch`).
        Not running: success."""
        _, data = self._owned(instance_id)
        where = remote.reach(data, container)
        if status.state_of(data) != "running":
            return
        endpoint = status.endpoint_of(data)
        if not self._options.ssh or not endpoint:
            raise Unavailable(f"instance {instance_id} has no SSH endpoint to stop container {container!r} with")
        target = remote.ssh_target(data, endpoint, self._options, self._operator.get())
        self._exits.watch(instance_id)
        command = remote.stop_command(where.docker_name, grace=grace)
        ssh.run_to_end(
            target, command, timeout=STOP_ANSWER_SECONDS, what=f"the stop of {container or 'the workload'!r}"
        )

    def usage(self, instance_id: base.InstanceId) -> base.InstanceUsage | None:
        """Each container's process tree on the VM, from its /proc over SSH, at most once per
        `providers.usage.DEFAULT_SAMPLE_INTERVAL` per instance (`providers.ssh.usage`)."""
        return instance_usage(self._usage.sample_all(instance_id, lambda: self._read_usage(instance_id)))

    def _read_usage(self, instance_id: base.InstanceId) -> dict[str, Reading]:
        _, data = self._owned(instance_id)
        endpoint = status.endpoint_of(data)
        if status.state_of(data) != "running":
            return {}
        if not self._options.ssh or not endpoint:
            raise NotSupported(f"instance {instance_id} has no SSH endpoint to measure its usage over")
        target = remote.ssh_target(data, endpoint, self._options, self._operator.get())
        return ssh_usage.read_usage(target, remote.usage_roots(data))

    def _owned(self, instance_id: base.InstanceId) -> tuple[str, dict[str, Any]]:
        found = self._inventory.describe(instance_id)
        if found is None:
            raise NotFound(f"no aws instance {instance_id}")
        return found


def _secrets(request: base.ProvisionRequest) -> builtins.list[str]:
    """Every env value of every container: scrubbed from EC2's error messages."""
    values = {*request.env.values(), *(v for env in request.container_env.values() for v in env.values())}
    return sorted(value for value in values if value)


def _conforms(
    provider: AwsProvider,
) -> tuple[
    base.Provider,
    base.LogStreamer,
    base.Executor,
    base.ContainerStopper,
    base.UsageReporter,
    base.PortForwarder,
    base.NoticeSource,
]:
    """mypy proves here, once, that AwsProvider satisfies the seam's protocols."""
    return provider, provider, provider, provider, provider, provider, provider
