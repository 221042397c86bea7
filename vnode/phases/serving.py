"""What the kubelet API reads from a Handler: the instance behind a container, its
logs, exec, attach and port-forward, and the usage behind `/stats/summary` and `/metrics/resource`.

Called by `vnode.kubelet` on worker threads (never the reactor), through the Handler.
Any container of the Pod (app or init) is served where the provider runs several
(`Shapes.several_containers`), else the first app container only. Reads the tracked map
only; never changes it, and never writes to the API.
Tests: tests/vnode/kubelet/test_listeners.py, tests/vnode/test_stats_summary.py,
tests/vnode/kubelet/test_port_forward.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

from kube import names
from providers import errors
from providers.base import (
    Attacher,
    Executor,
    InstanceId,
    LogOptions,
    LogStream,
    LogStreamer,
    PortConnection,
    PortForwarder,
    Process,
)
from vnode.ephemeral.containers import Ephemerals
from vnode.model.tracking import Tracked
from vnode.phases.context import PhaseContext
from vnode.stats import usage

JsonDict = dict[str, Any]
# What a provider must implement for each kubelet streaming capability (`kubelet_instance`
# checks it, so the methods below may cast).
_CAPABILITIES: dict[str, type] = {"logs": LogStreamer, "exec": Executor, "attach": Attacher}


class Serving:
    def __init__(self, context: PhaseContext) -> None:
        self._provider = context.provider
        self._tracked = context.tracked
        self._now = context.now
        self._ephemerals = context.ephemerals

    def _ephemeral(self, entry: Tracked, container: str) -> Ephemerals | None:
        """The Ephemerals running `container`, if it names an ephemeral container of the Pod."""
        if self._ephemerals is not None and self._ephemerals.known(entry.key, container):
            return self._ephemerals
        return None

    @property
    def _node_name(self) -> str:
        return names.node_name(self._provider.name)

    def kubelet_instance(self, namespace: str, name: str, container: str, *, capability: str) -> InstanceId:
        """The instance serving the Pod's container for `capability` (`logs`, `exec` or
        `attach`); NotFound or NotSupported with the reason otherwise."""
        entry, _ = self._serve(namespace, name, container, capability=capability)
        assert entry.instance_id is not None
        return entry.instance_id

    def _serve(self, namespace: str, name: str, container: str, *, capability: str) -> tuple[Tracked, str]:
        """The tracked Pod and the container name to hand the provider ("" for a provider that
        runs the Pod's one container); NotFound or NotSupported with the reason otherwise."""
        entry = self._tracked.get(f"{namespace}/{name}")
        if entry is None:
            raise errors.NotFound(f'pod "{namespace}/{name}" is not on node {self._node_name}')
        if entry.instance_id is None:
            raise errors.NotFound(f'pod "{namespace}/{name}" has no instance yet: nothing to {capability}')
        if self._ephemeral(entry, container) is not None:
            # Attach and logs are the ephemeral process's own; an exec runs in its target's context.
            if capability == "exec" and not isinstance(self._provider, Executor):
                raise errors.NotSupported(f"provider {self._provider.name!r} does not support exec")
            return entry, container
        spec = entry.pod.get("spec") or {}
        apps = [str(c.get("name")) for c in spec.get("containers") or [{}]]
        several = self._provider.capabilities().shapes.several_containers
        served = apps + [str(c.get("name")) for c in spec.get("initContainers") or []] if several else apps[:1]
        if container not in served:
            # A provider that runs one container runs the Pod's first (providers.podspec).
            raise errors.NotFound(f'container "{container}" not found in pod "{namespace}/{name}"')
        if not isinstance(self._provider, _CAPABILITIES[capability]):
            raise errors.NotSupported(f"provider {self._provider.name!r} does not support {capability}")
        return entry, container if several else ""

    def get_container_logs(self, namespace: str, name: str, container: str, options: LogOptions) -> LogStream:
        """The container's log as the provider streams it; NotSupported without LogStreamer.
        InvalidRequest (the kubelet's 400) for a container that has not started yet, and for
        `previous` when that container has not restarted."""
        entry, chosen = self._serve(namespace, name, container, capability="logs")
        assert entry.instance_id is not None
        previous_missing = f'previous terminated container "{container}" in pod "{name}" not found'
        if (ephemerals := self._ephemeral(entry, container)) is not None:
            if options.previous:  # never restarted, so there is no earlier run
                raise errors.InvalidRequest(previous_missing)
            return ephemerals.logs(entry.key, container, options)
        if options.previous and _restarts(entry, chosen) == 0:
            # The kubelet's answer (kubectl shows it as BadRequest): there was no earlier run.
            raise errors.InvalidRequest(previous_missing)
        if not options.previous and (reason := _waiting_to_start(entry, chosen)):
            raise errors.InvalidRequest(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        try:
            return cast(LogStreamer, self._provider).logs(
                entry.instance_id, dataclasses.replace(options, container=chosen)
            )
        except errors.NotFound as exc:
            if options.previous:
                raise errors.InvalidRequest(f"{previous_missing}: {exc}") from exc
            raise

    def run_in_container(
        self, namespace: str, name: str, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> Process:
        """Start a command in the Pod's container; NotSupported without Executor."""
        entry, chosen = self._serve(namespace, name, container, capability="exec")
        assert entry.instance_id is not None
        executor = cast(Executor, self._provider)
        if (ephemerals := self._ephemeral(entry, container)) is not None:
            several = self._provider.capabilities().shapes.several_containers
            chosen = ephemerals.target(entry, container) if several else ""
        if not chosen:
            return executor.exec(entry.instance_id, list(command), tty=tty, stdin=stdin)
        return executor.exec(entry.instance_id, list(command), tty=tty, stdin=stdin, container=chosen)

    def attach_to_container(self, namespace: str, name: str, container: str, *, tty: bool, stdin: bool) -> Process:
        """Attach to the Pod's container's own process; NotSupported without Attacher."""
        entry, chosen = self._serve(namespace, name, container, capability="attach")
        assert entry.instance_id is not None
        if (ephemerals := self._ephemeral(entry, container)) is not None:
            return ephemerals.attach(entry.key, container)
        attacher = cast(Attacher, self._provider)
        if not chosen:
            return attacher.attach(entry.instance_id, stdin=stdin, tty=tty)
        return attacher.attach(entry.instance_id, stdin=stdin, tty=tty, container=chosen)

    def pod_usage(self) -> usage.NodeUsage:
        """The last samples of this node's Pods (`vnode.stats.usage.collect`)."""
        return usage.collect(self._provider, self._tracked, node_name=self._node_name)

    def forwarding_instance(self, namespace: str, name: str) -> InstanceId:
        """The instance behind a Pod for port-forward: NotFound (no Pod here, or no instance
        yet) or NotSupported ("port-forward is not supported by provider X")."""
        entry = self._tracked.get(f"{namespace}/{name}")
        if entry is None:
            raise errors.NotFound(f'pod "{namespace}/{name}" is not on node {self._node_name}')
        if not isinstance(self._provider, PortForwarder):
            raise errors.NotSupported(f"port-forward is not supported by provider {self._provider.name}")
        if entry.instance_id is None:
            raise errors.NotFound(f'pod "{namespace}/{name}" has no instance yet: nothing to port-forward to')
        return entry.instance_id

    def port_forward(self, namespace: str, name: str, port: int) -> PortConnection:
        """One connection to `port` in the Pod's instance (the Pod's containers share it)."""
        instance_id = self.forwarding_instance(namespace, name)
        return cast(PortForwarder, self._provider).port_forward(instance_id, port)


def _restarts(entry: Tracked, container: str) -> int:
    """How often `container` (empty: the Pod's one container) has restarted."""
    if not container:
        return entry.runs.restarts
    runs = entry.containers.get(container)
    return runs.restarts if runs is not None else 0


def _waiting_to_start(entry: Tracked, container: str) -> str:
    """The waiting reason of a container that has never started (as the Pod's status says
    it), else "". Only for a provider that runs several containers: one container's logs
    are the provider's to answer."""
    if not container:
        return ""
    status: Mapping[str, Any] = entry.desired_status or entry.written_status or {}
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    mine = next((s for s in statuses if isinstance(s, Mapping) and s.get("name") == container), None)
    if mine is None or "containerID" in mine or "terminated" in (mine.get("lastState") or {}):
        return ""
    return str(((mine.get("state") or {}).get("waiting") or {}).get("reason") or "")
