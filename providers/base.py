"""The provider seam: the `Provider` protocol, the optional `LogStreamer`, `Executor` and
`NoticeSource` (`providers.notices`) protocols, and the frozen values that cross the seam.

The streaming and control protocols (and `LogOptions`) live in `providers.streams`, the ids in
`providers.ids` and the Pod's shape in `providers.shape`; this module re-exports them and is
imported by none of them. The vnode, placement and the kubelet API are typed against these
protocols only; they never import a concrete provider or branch on a provider's name. Providers report facts
(`Instance`); turning facts into Kubernetes status is the vnode's job. Every method may
raise only `providers.errors` types.
Tests: tests/providers/test_contract.py.
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from providers.egress import OPEN as OPEN_EGRESS
from providers.egress import Egress, EgressMode
from providers.errors import ProviderError, QuotaExceeded, Unauthorized
from providers.ids import ClaimName as ClaimName
from providers.ids import InstanceId as InstanceId
from providers.notices import Notice as Notice
from providers.notices import NoticeKind as NoticeKind
from providers.notices import NoticeSource as NoticeSource
from providers.owner import Owner
from providers.pullauth import RegistryAuth
from providers.shape import ContainerFacts, ContainerSpec, Shapes, Volume
from providers.streams import Attacher as Attacher
from providers.streams import ContainerStopper as ContainerStopper
from providers.streams import DetachablePortConnection as DetachablePortConnection
from providers.streams import Executor as Executor
from providers.streams import LogOptions as LogOptions
from providers.streams import LogStream as LogStream
from providers.streams import LogStreamer as LogStreamer
from providers.streams import PolledLogStream as PolledLogStream
from providers.streams import PortConnection as PortConnection
from providers.streams import PortForwarder as PortForwarder
from providers.streams import Process as Process
from providers.streams import Restarter as Restarter
from providers.usage import InstanceUsage as InstanceUsage
from providers.usage import ResourceUsage as ResourceUsage


class Tier(str, enum.Enum):
    """Capacity type, spelled as in the `nebula.io/capacity-type` annotation."""

    SPOT = "Spot"
    ON_DEMAND = "OnDemand"

    @classmethod
    def parse(cls, text: str | None) -> Tier | None:
        """The tier `text` names, or None: case, surrounding white space, `-` and `_` are
        ignored, so `spot`, ` Spot `, `on-demand`, `on_demand` and `OnDemand` all read. The
        one reader of a tier's spelling (annotations, NodePools, provider options)."""
        folded = (text or "").strip().lower().replace("-", "").replace("_", "")
        return next((tier for tier in cls if tier.value.lower() == folded), None)


class InstanceState(str, enum.Enum):
    """What a provider knows of one instance. Unknown provider states map to PROVISIONING."""

    PROVISIONING = "provisioning"  # asked for; capacity not yet confirmed
    INITIALIZING = "initializing"  # capacity held; the workload is starting
    RUNNING = "running"  # the workload runs
    SUCCEEDED = "succeeded"  # the workload exited 0
    FAILED = "failed"  # the workload exited non-zero, or the instance broke
    TERMINATING = "terminating"  # terminate was asked; not gone yet
    TERMINATED = "terminated"  # gone, by request or by the provider (e.g. spot reclaim)


# SUCCEEDED and FAILED: the workload ended, and the instance is still there (its output can
# be read; `restart` may run the workload again; on a provider whose
# `Capabilities.bills_after_exit` it still costs money until `terminate`).


class BillingStart(str, enum.Enum):
    """From which fact a provider bills an instance (`Capabilities.billing_starts`); the vnode
    opens the Pod's billing record (`kube.billing`) at that time, never at the time it looked."""

    CREATED = "Created"  # from `Instance.created_at`: queued and provisioning time included
    STARTED = "Started"  # from `Instance.started_at` of the first run: once the workload runs


TERMINAL_STATES = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.TERMINATED})


@dataclass(frozen=True)
class PodSpec:
    """What a provider may read of the Pod: identity, its containers' programs, and the
    Pod's effective resources (every container counted, as the API server counts them).

    `container`, `image`, `command`, `args`, `working_dir`, `ports` and `stdin` are the first
    app container's; `containers` lists every app container (that one first) and
    `init_containers` the init containers in order (native sidecars marked). Built by hand
    with no `containers`, the Pod is the one container the first-container fields describe
    (`app_containers`).

    Built by `providers.podspec.pod_spec_from_dict`, the one reader of a Pod's request;
    placement reads the same values. Env is NOT here: the resolved env (with Secret values)
    travels in `ProvisionRequest.env` only.
    """

    namespace: str
    name: str
    uid: str
    container: str
    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str | None = None
    ports: tuple[int, ...] = ()
    cpu: float | None = None  # cores: the Pod's effective request (each container's request, else limit)
    memory: int | None = None  # bytes: the Pod's effective request, as for cpu
    accelerator: str | None = None  # `nebula.io/accelerator`, stripped and lower-cased
    gpu_count: int = 0  # the Pod's effective `nvidia.com/gpu`; 1 if an accelerator names no count
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    stdin: bool = False  # the container asks for a stdin (`kubectl attach -i` writes to it)
    containers: tuple[ContainerSpec, ...] = ()
    init_containers: tuple[ContainerSpec, ...] = ()
    restart_policy: str = "Always"  # the Pod's: Always, OnFailure or Never
    active_deadline_seconds: int | None = None  # the Pod's spec.activeDeadlineSeconds (a positive integer)
    termination_grace_seconds: float | None = None  # spec.terminationGracePeriodSeconds (None: unset, 30)

    def app_containers(self) -> tuple[ContainerSpec, ...]:
        """Every app container; the first-container fields as one when none were listed."""
        if self.containers:
            return self.containers
        first = ContainerSpec(
            self.container, self.image, self.command, self.args, self.working_dir, self.ports, stdin=self.stdin
        )
        return (first,)


class _Redacted:
    """Mixin: repr names the keys of `env`/`data`, never the values (design I4)."""

    def _redacted_keys(self) -> str:
        values = getattr(self, "env", None) or getattr(self, "data", None) or {}
        return f"{{{len(values)} keys: {','.join(sorted(values))}}}"


@dataclass(frozen=True, repr=False)
class ProvisionRequest(_Redacted):
    """What `provision` needs that is not on the Pod."""

    claim: ClaimName
    capacity_type: Tier | None = None
    region: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # the first app container's; secret values: never log
    container_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # every container's, by name
    volumes: tuple[Volume, ...] = ()  # the Pod's volumes, contents resolved (Secret bytes: never log)
    egress: Egress = OPEN_EGRESS  # the pool's policy; a mode not in `Capabilities.egress` is NotSupported
    # The Pod's imagePullSecrets, by registry host (`providers.pullauth`); passwords: never log
    registry_auth: Mapping[str, RegistryAuth] = field(default_factory=dict)

    def env_for(self, container: str) -> Mapping[str, str]:
        """The resolved env of `container` (`env` when it has no entry of its own)."""
        return self.container_env.get(container, self.env)

    def __repr__(self) -> str:
        return (
            f"ProvisionRequest(claim={self.claim!r}, capacity_type={self.capacity_type!r}, "
            f"region={self.region!r}, env={self._redacted_keys()}, containers={sorted(self.container_env)}, "
            f"volumes={[v.name for v in self.volumes]}, egress={self.egress.describe()!r}, "
            f"registries={sorted(self.registry_auth)})"
        )


@dataclass(frozen=True, repr=False)
class ConnectCredential(_Redacted):
    """A credential minted once by `provision` (a token, a private key); goes to the
    Pod's connect Secret and nowhere else."""

    data: Mapping[str, bytes]

    def __repr__(self) -> str:
        return f"ConnectCredential({self._redacted_keys()})"


@dataclass(frozen=True)
class ProvisionResult:
    """`reserved`: capacity is committed (the Pod may say Initializing).
    `credential` is returned only by the call that created the instance."""

    instance_id: InstanceId
    reserved: bool
    credential: ConnectCredential | None = None
    endpoint: str | None = None


@dataclass(frozen=True)
class Instance:
    """Facts about one instance, as the provider last saw it.

    For SUCCEEDED and FAILED, `exit_code` is the workload's exit code (None only when the
    provider could not learn it: then FAILED, with `message` saying why), `finished_at` when
    it ended and `exit_reason` the kubelet's word for it (`Completed`, `Error`, `OOMKilled`,
    ...; empty: the vnode derives it from the code). `started_at` is when the current run
    began. `runs` counts the workload's starts in this instance (1 + in-place restarts), so
    a list read before a `restart` is told from one read after it. `preempted`: the provider
    took the capacity back (a spot reclaim); the vnode says so in a `Preempted` Event.
    `containers`: per-container facts, from a provider that runs several (`Shapes`); empty
    when the instance runs the one container whose facts the instance's are.
    """

    id: InstanceId
    claim: ClaimName
    state: InstanceState
    created_at: datetime
    endpoint: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    message: str = ""
    region: str | None = None
    capacity_type: Tier | None = None
    usage: ResourceUsage | None = None
    exit_reason: str = ""
    runs: int = 1
    preempted: bool = False
    containers: tuple[ContainerFacts, ...] = ()


# The node capacity of a provider whose cloud sells as much as is asked for (a VM or a
# sandbox per Pod): large enough that the scheduler never holds a Pod back for it.
UNBOUNDED_CAPACITY: Mapping[str, str] = {"cpu": "10000", "memory": "100Ti", "pods": "1000", "nvidia.com/gpu": "1000"}


@dataclass(frozen=True)
class Capabilities:
    """What a provider declares about itself; read once when its node is built."""

    poll_interval: float = 15.0  # seconds between list() calls
    list_lag: float = 0.0  # a fresh launch may be missing from list() this long
    tiers: tuple[Tier, ...] = (Tier.ON_DEMAND,)
    regions: tuple[str, ...] = ()
    capacity: Mapping[str, str] = field(default_factory=dict)  # node capacity, e.g. {"cpu": "64"}
    pulls_images: bool = True  # False: the container image is not used (say so to the user)
    uses_pull_secrets: bool = False  # True: `ProvisionRequest.registry_auth` reaches the image pull
    log_timestamps: bool = False  # True: log lines are stamped at the source (timestamps, since*)
    # True: the provider implements `Restarter` (the workload runs again in the same instance,
    # the last run's output kept for `--previous`). False: the vnode replaces the instance.
    restarts_in_place: bool = False
    # True: an instance whose workload ended (SUCCEEDED/FAILED) still costs money until
    # terminated (a VM), so the vnode terminates it when the Pod turns terminal. False:
    # nothing runs or bills once the workload ends (local processes); the instance and its
    # output stay until the Pod is deleted.
    bills_after_exit: bool = True
    # True: after `terminate`, the output stays readable (`logs`) and the instance is listed
    # as TERMINATED for a while; False: terminate discards the output.
    keeps_output_after_terminate: bool = False
    shapes: Shapes = field(default_factory=Shapes)  # the Pod shapes served (providers.shapecheck)
    # The NodePool egress modes the provider enforces (`providers.egress`); placement skips it
    # for a pool asking for another, and `provision` raises NotSupported for one.
    egress: frozenset[EgressMode] = frozenset({EgressMode.OPEN})
    # When the vendor starts billing an instance (docs/providers.md): the billing record's
    # span opens at `created_at` (CREATED) or at `started_at` once the workload runs (STARTED).
    billing_starts: BillingStart = BillingStart.CREATED


@dataclass(frozen=True)
class Offering:
    """One thing a provider can sell: an accelerator count on a tier in a region."""

    accelerator: str | None  # None: CPU only
    gpu_count: int
    tier: Tier
    region: str
    hourly_price: float | None  # None: unknown
    available: bool = True
    instance_type: str = ""


class BlockBreadth(str, enum.Enum):
    OFFERING = "offering"  # {provider, accelerator, tier, region}
    TIER = "tier"  # {provider, tier}
    PROVIDER = "provider"  # {provider}


@dataclass(frozen=True)
class BlockScope:
    """How wide a refusal blocks. Fields outside the breadth are None."""

    provider: str
    breadth: BlockBreadth
    tier: Tier | None = None
    accelerator: str | None = None
    region: str | None = None
    reason: str = ""


class Provider(Protocol):
    """A compute provider. Every method is safe for concurrent use and raises only
    `providers.errors` types. Constructors `(name, options)` store and do no I/O."""

    @property
    def name(self) -> str:
        """Stable id; the virtual node is `nebula-<name>`."""
        ...

    def capabilities(self) -> Capabilities:
        """Pure: poll interval, tiers, regions, node capacity, flags."""
        ...

    @property
    def owner(self) -> Owner:
        """Whose instances this provider sees (constructor keyword `owner`; default
        `Owner.standalone(name)`). Every instance it creates carries `owner.key`."""
        ...

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        """Start one instance for `request.claim`.

        Idempotent on the claim (I1): if an instance of this owner with this claim exists
        whose workload may still run (not ended, terminating or terminated), return it
        (credential None) instead of creating another. Raises `Refused` subclasses for a refusal, `Unavailable` when it
        could not ask (the caller retries and adopts), `InvalidRequest` / `NotSupported`
        when this Pod can never run here (the message names the field).
        """
        ...

    def terminate(self, instance_id: InstanceId) -> None:
        """Ask the instance to go: the workload stops and the compute is released.
        Idempotent: an already-gone or already-terminating instance is success. Another
        owner's instance is never touched (its id is taken as gone)."""
        ...

    def get(self, instance_id: InstanceId) -> Instance | None:
        """The instance's facts; None: gone (or not this owner's). TERMINATED: gone as compute,
        still shown (with its output, where kept), costing nothing. `Unavailable`: we could
        not ask, which is NOT gone (I3)."""
        ...

    def list(self) -> list[Instance]:
        """Every instance this owner has here (SUCCEEDED/FAILED ones included, TERMINATED
        ones where the provider still knows them), in as few calls as possible.
        Raises `Unavailable` rather than return a partial list."""
        ...

    def offerings(self) -> builtins.list[Offering]:
        """What can be provisioned, with prices where known."""
        ...

    def expand_regions(self, declared: Sequence[str]) -> builtins.list[str]:
        """Pure: group tokens (`us`, `eu`, `ap`) to concrete regions, order kept, no repeats."""
        ...

    def classify_provision_error(
        self, err: ProviderError, *, accelerator: str | None, tier: Tier | None, region: str | None
    ) -> BlockScope:
        """Pure: how widely a refusal from `provision` should block this provider."""
        ...


@runtime_checkable
class UsageReporter(Protocol):
    """Optional: a provider that measures its instances' CPU and memory (`providers.usage`)."""

    def usage(self, instance_id: InstanceId) -> InstanceUsage | None:
        """The last sample of the instance's running containers, measured at most once per
        the provider's sampling interval and cached in between. None: nothing of it runs.
        `NotFound` for an unknown instance, `Unavailable` when it could not be measured."""
        ...


def default_block_scope(
    provider: str, err: ProviderError, *, accelerator: str | None, tier: Tier | None, region: str | None
) -> BlockScope:
    """The common classification: credentials block the provider, quota the tier,
    anything else the one offering."""
    reason = f"{type(err).__name__}: {err}"
    if isinstance(err, Unauthorized):
        return BlockScope(provider, BlockBreadth.PROVIDER, reason=reason)
    if isinstance(err, QuotaExceeded):
        return BlockScope(provider, BlockBreadth.TIER, tier=tier, reason=reason)
    return BlockScope(provider, BlockBreadth.OFFERING, tier=tier, accelerator=accelerator, region=region, reason=reason)


def no_capacity_scope(
    provider: str, reason: str, *, accelerator: str | None, tier: Tier | None, region: str | None
) -> BlockScope:
    """No capacity: block the one offering asked for (a request that named no tier asked for
    OnDemand). Used by the providers' own classifications."""
    tier = tier or Tier.ON_DEMAND
    return BlockScope(provider, BlockBreadth.OFFERING, tier=tier, accelerator=accelerator, region=region, reason=reason)
