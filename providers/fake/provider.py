"""`FakeProvider`: the Provider, LogStreamer, Executor, Attacher, Restarter, ContainerStopper,
UsageReporter and NoticeSource seam over a fake cloud, several containers and init containers included.

Built by the provider registry from settings (`providers.fake.FakeProvider`) and by
tests. Reaches a cloud in-process (a process-wide cloud named by the `cloud` option) or
over HTTP (the `url` option, a `manage.py fakecloud serve` service); every call carries
its owner's key, so it sees only its own instances. Raises only `providers.errors`;
never imports Django or another provider.
Tests: tests/providers/fake/test_fake_provider.py.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from providers import base, errors, shape
from providers.egress import EgressMode
from providers.errors import ProviderError
from providers.fake import forward, usage
from providers.fake.client import FakeCloudClient
from providers.fake.cloud import FakeCloud
from providers.fake.logs import LogChunk, ScriptedLogStream
from providers.fake.registry import cloud_named
from providers.fake.scenario import Scenario, load_scenario
from providers.owner import Owned, Owner
from providers.shape import Shapes

OPTIONS = frozenset({"cloud", "scenario", "url", "timeout", "restarts_in_place", "egress"})
# It runs every container of the Pod in the order a kubelet does and records every kind of
# volume (materialised by path: each container sees its mounted files, contents not kept).
# Exec probes: its scripted `cat PATH` / `test -e PATH` answer from the container's files,
# which control calls (`put_file`, `remove_file`) change, in-process and over HTTP. No TCP or
# HTTP probes: a fake:// endpoint is not reachable.
SHAPES = Shapes(
    several_containers=True,
    init_containers=True,
    sidecars=True,
    probes=frozenset({"exec"}),
    volumes=frozenset(shape.VOLUME_KINDS),
)


class _Backend(Protocol):
    """What the provider needs of a cloud; `FakeCloud` and `FakeCloudClient` both are one."""

    def provision(self, pod: base.PodSpec, request: base.ProvisionRequest, *, owner: str) -> base.ProvisionResult: ...
    def terminate(self, instance_id: str, *, owner: str) -> None: ...
    def get(self, instance_id: str, *, owner: str) -> base.Instance | None: ...
    def list(self, *, owner: str) -> builtins.list[base.Instance]: ...
    def restart(self, instance_id: str, *, owner: str, container: str = "") -> None: ...
    def stop_container(self, instance_id: str, container: str, *, owner: str, grace: float = 0.0) -> None: ...
    def offerings(self) -> builtins.list[base.Offering]: ...
    def notices(self, *, owner: str, wait: float, limit: int = ...) -> builtins.list[base.Notice]: ...
    def ack(self, notice_id: str, *, owner: str) -> None: ...
    def log_chunk(
        self,
        instance_id: str,
        *,
        owner: str,
        after: int,
        limit: int,
        previous: bool = False,
        opening: bool = False,
        container: str = "",
    ) -> LogChunk: ...


class FakeProvider(Owned):
    """A provider over a fake cloud.

    Options: `cloud` (in-process cloud name; default: the provider name), `scenario` (a
    YAML path or an inline mapping; the first provider naming a cloud decides it), `url`
    (use the HTTP service instead), `timeout` (seconds per HTTP call, default 10),
    `restarts_in_place` (default true; false: `restart` is NotSupported and the
    capabilities say so, so the vnode replaces the instance instead), `egress` (the NodePool
    egress modes it declares it enforces, e.g. [Open, Blocked]; default [Open]: it stands for a
    cloud that enforces them, and records each request's policy in the call log).
    """

    def __init__(self, name: str, options: Mapping[str, Any] | None = None, *, owner: Owner | None = None) -> None:
        self._owner = owner or Owner.standalone(name)
        opts = dict(options or {})
        unknown = set(opts) - OPTIONS
        if unknown:
            raise ValueError(f"fake provider: unknown options {sorted(unknown)} (known: {sorted(OPTIONS)})")
        if "url" in opts and "cloud" in opts:
            raise ValueError("fake provider: give either 'url' (the HTTP service) or 'cloud' (in-process), not both")
        scenario = opts.get("scenario")
        if scenario is not None and not isinstance(scenario, (str, Path, Mapping)):
            raise ValueError("fake provider: 'scenario' is a file path or a mapping")
        self._name = name
        self._cloud_name = str(opts.get("cloud") or name)
        self._scenario_source: str | Path | Mapping[str, Any] | None = scenario
        # An inline scenario is checked now (no I/O); a file is read on first use.
        self._scenario = load_scenario(scenario) if isinstance(scenario, Mapping) else None
        url = opts.get("url")
        if url is not None and not isinstance(url, str):
            raise ValueError("fake provider: 'url' is a string such as http://127.0.0.1:8600")
        self._client = FakeCloudClient(url, timeout=float(opts.get("timeout", 10.0))) if url else None
        restarts = opts.get("restarts_in_place", True)
        if not isinstance(restarts, bool):
            raise ValueError("fake provider: 'restarts_in_place' is true or false")
        self._restarts_in_place = restarts
        self._egress = _egress_modes(opts.get("egress", [EgressMode.OPEN.value]))

    # -- Provider ---------------------------------------------------------------------
    @property
    def cloud(self) -> FakeCloud:
        """The in-process cloud, for tests to inject faults and read the call log.
        Over HTTP use `client` (or the HTTP control routes) instead."""
        if self._client is not None:
            raise errors.NotSupported("fake provider over HTTP: use .client, not .cloud")
        return cloud_named(self._cloud_name, lambda: FakeCloud(self._load_scenario()))

    @property
    def client(self) -> FakeCloudClient | None:
        return self._client

    def capabilities(self) -> base.Capabilities:
        scenario = self._pure_scenario()
        return base.Capabilities(
            poll_interval=scenario.poll_interval,
            list_lag=scenario.list_lag,
            tiers=scenario.tiers(),
            regions=scenario.concrete_regions(),
            capacity=dict(scenario.node_capacity),
            # The fake stands for a cloud that runs the image; its users need no
            # "image not used" notice on every Pod of a demo or benchmark.
            pulls_images=True,
            log_timestamps=True,
            restarts_in_place=self._restarts_in_place,
            # It stands for a cloud of VMs: an ended workload's machine bills until
            # terminated, and a terminated one stays listed, output readable, for the
            # scenario's retention_seconds.
            bills_after_exit=True,
            keeps_output_after_terminate=True,
            shapes=SHAPES,
            egress=self._egress,
            billing_starts=scenario.billing_starts,  # the scenario's `billing_starts` (default Created)
        )

    def provision(self, pod: base.PodSpec, request: base.ProvisionRequest) -> base.ProvisionResult:
        if request.egress.mode not in self._egress:
            modes = ", ".join(sorted(m.value for m in self._egress))
            raise errors.NotSupported(
                f"spec.egress: {self._name} cannot enforce egress {request.egress.mode.value}; only {modes}"
            )
        return self._backend().provision(pod, request, owner=self._owner.key)

    def terminate(self, instance_id: base.InstanceId) -> None:
        self._backend().terminate(instance_id, owner=self._owner.key)

    def get(self, instance_id: base.InstanceId) -> base.Instance | None:
        return self._backend().get(instance_id, owner=self._owner.key)

    def list(self) -> builtins.list[base.Instance]:
        return self._backend().list(owner=self._owner.key)

    def usage(self, instance_id: base.InstanceId) -> base.InstanceUsage | None:
        """What the scenario's `usage` says the instance's running containers use now."""
        instance = self.get(instance_id)
        if instance is None:
            raise errors.NotFound(f"no fake instance {instance_id}")
        return usage.usage_of(instance, self._pure_scenario().usage, now=datetime.now(UTC))

    def offerings(self) -> builtins.list[base.Offering]:
        return self._backend().offerings()

    def expand_regions(self, declared: Sequence[str]) -> builtins.list[str]:
        return self._pure_scenario().expand_regions(tuple(declared))

    def classify_provision_error(
        self, err: ProviderError, *, accelerator: str | None, tier: base.Tier | None, region: str | None
    ) -> base.BlockScope:
        return base.default_block_scope(self._name, err, accelerator=accelerator, tier=tier, region=region)

    # -- LogStreamer, Executor, Attacher, Restarter ---------------------------------------
    def logs(self, instance_id: base.InstanceId, options: base.LogOptions) -> base.LogStream:
        """Scripted output, in-process and over HTTP; with `previous`, the run before the
        last restart (NotFound if the workload has run once)."""
        backend, owner = self._backend(), self._owner.key

        def fetch(after: int, limit: int, *, opening: bool = False) -> LogChunk:
            return backend.log_chunk(
                instance_id,
                owner=owner,
                after=after,
                limit=limit,
                previous=options.previous,
                opening=opening,
                container=options.container,
            )

        return ScriptedLogStream(fetch, options).open()

    def exec(
        self, instance_id: base.InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> base.Process:
        """Scripted commands (see providers.fake.process) in a running container. Over HTTP
        only without stdin or a terminal (the command runs to its end on the service, as an
        exec probe's does); with either, NotSupported: use an in-process cloud."""
        if self._client is not None and (tty or stdin):
            raise errors.NotSupported(
                "fake provider over HTTP execs only without stdin or a TTY; use an in-process cloud"
            )
        if self._client is not None:
            return self._client.exec(instance_id, command, owner=self._owner.key, container=container)
        return self.cloud.exec(instance_id, command, owner=self._owner.key, tty=tty, stdin=stdin, container=container)

    def attach(self, instance_id: base.InstanceId, *, stdin: bool, tty: bool, container: str = "") -> base.Process:
        """Scripted, in-process only: the workload echoes each stdin line back on its
        console, and the attachment ends when stdin does."""
        if self._client is not None:
            raise errors.NotSupported("fake provider over HTTP does not attach; use an in-process cloud")
        return self.cloud.attach(instance_id, owner=self._owner.key, tty=tty, stdin=stdin, container=container)

    def port_forward(self, instance_id: base.InstanceId, port: int) -> base.PortConnection:
        """In-process only: the scenario's `ports.echo` echo every byte back; any other port
        is refused (connection refused), as an instance with nothing listening there."""
        if self._client is not None:
            raise errors.NotSupported("fake provider over HTTP does not port-forward; use an in-process cloud")
        instance = self.cloud.get(instance_id, owner=self._owner.key)
        echo_ports = self._load_scenario().echo_ports
        return forward.open_port(instance, port, echo_ports=echo_ports, instance_id=instance_id)

    def restart(self, instance_id: base.InstanceId, container: str = "") -> None:
        """The ended container (empty: the whole ended workload) runs again in the same
        instance, in-process and over HTTP. NotSupported when `restarts_in_place` is false."""
        if not self._restarts_in_place:
            raise errors.NotSupported("fake provider: restarts in place are turned off (restarts_in_place: false)")
        self._backend().restart(instance_id, owner=self._owner.key, container=container)

    def stop_container(self, instance_id: base.InstanceId, container: str, *, grace: float) -> None:
        """SIGTERM now, SIGKILL `grace` seconds later, on the cloud's clock (the grace travels
        on the wire); the scenario's `sigterm` says how the container reacts (FakeCloud)."""
        self._backend().stop_container(instance_id, container, owner=self._owner.key, grace=grace)

    # -- NoticeSource -------------------------------------------------------------------------
    def notices(self, wait: float) -> Sequence[base.Notice]:
        """The cloud's notices of an `interrupt` fault about this owner's instances (a long
        poll, at most 20 s, 100 a batch); a delivered one comes again after the scenario's
        `notice_redelivery` until acked. Unavailable during an outage. With the scenario's
        `notices: false` never any: the interruption is seen only after the fact."""
        return self._backend().notices(owner=self._owner.key, wait=wait)

    def ack(self, notice: base.Notice) -> None:
        self._backend().ack(notice.receipt or notice.id, owner=self._owner.key)

    # -- internals ----------------------------------------------------------------------
    def _backend(self) -> _Backend:
        return self._client if self._client is not None else self.cloud

    def _load_scenario(self) -> Scenario:
        """The scenario from the options. A broken file is `Unavailable`: the cloud
        cannot be reached as configured, and nothing must conclude that instances are gone."""
        if self._scenario is None:
            try:
                self._scenario = load_scenario(self._scenario_source)
            except (ValueError, TypeError) as exc:
                raise errors.Unavailable(str(exc)) from exc
        return self._scenario

    def _pure_scenario(self) -> Scenario:
        """The scenario for the pure methods. Over HTTP without a `scenario` option it is
        the service's, fetched once; while the service is unreachable, the default."""
        if self._client is None or self._scenario_source is not None:
            try:
                return self._load_scenario()
            except errors.Unavailable:
                return load_scenario(None)
        if self._scenario is None:
            try:
                self._scenario = load_scenario(self._client.scenario())
            except (errors.ProviderError, ValueError, TypeError):
                return load_scenario(None)
        return self._scenario


_check_provider: type[base.Provider] = FakeProvider
_check_logs: type[base.LogStreamer] = FakeProvider
_check_exec: type[base.Executor] = FakeProvider
_check_attach: type[base.Attacher] = FakeProvider
_check_restart: type[base.Restarter] = FakeProvider
_check_stop: type[base.ContainerStopper] = FakeProvider
_check_usage: type[base.UsageReporter] = FakeProvider
_check_forward: type[base.PortForwarder] = FakeProvider
_check_notices: type[base.NoticeSource] = FakeProvider


def _egress_modes(raw: Any) -> frozenset[EgressMode]:
    """The `egress` option: a list of mode names (Open, Blocked, Allowlist)."""
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ValueError("fake provider: 'egress' is a list of modes such as [Open, Blocked]")
    modes = {m.value: m for m in EgressMode}
    unknown = [m for m in raw if m not in modes]
    if unknown:
        raise ValueError(f"fake provider: 'egress' modes {unknown} unknown (known: Open, Blocked, Allowlist)")
    return frozenset(modes[m] for m in raw)
