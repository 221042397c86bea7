"""One Runner per provider: its Handler, pod controller and node controller, started and
stopped together (and the Handler's prober). Built by `nebula_site.manager.runners.build_runner`; holds no
state of its own.
Tests: tests/vnode/test_restart.py.
"""

from __future__ import annotations

import threading
import time

from kube.client import Kube
from kube.events import EventRecorder
from kube.operations import OperationLimits
from providers.base import Provider
from vnode.blocklister import Blocklister
from vnode.ephemeral.budget import OutputBudget
from vnode.handler import Handler
from vnode.model.runs import DEFAULT_BACKOFF, BackoffPolicy
from vnode.nodecontroller import NodeController
from vnode.podcontroller import PodController
from vnode.poolpolicy import PoolPolicies
from vnode.probing.prober import DEFAULT_WORKERS


class Runner:
    def __init__(
        self,
        provider: Provider,
        *,
        kube: Kube,
        watch_kube: Kube,
        node_ip: str | None,
        kubelet_port: int,
        node_dns_name: str | None = None,
        poll_interval: float | None = None,
        blocklister: Blocklister | None = None,
        pools: PoolPolicies | None = None,
        workers: int = 8,
        lease_renew_interval: float = 10.0,
        backoff: BackoffPolicy = DEFAULT_BACKOFF,
        probe_workers: int = DEFAULT_WORKERS,
        operations: OperationLimits | None = None,
        output_budget: OutputBudget | None = None,
    ) -> None:
        self.provider = provider
        self.events = events = EventRecorder(kube, component=f"nebula-{provider.name}", host=f"nebula-{provider.name}")
        self.handler = Handler(
            provider,
            kube=kube,
            events=events,
            blocklister=blocklister,
            pools=pools,
            poll_interval=poll_interval,
            backoff=backoff,
            probe_workers=probe_workers,
            output_budget=output_budget,
        )
        self.pods = PodController(
            self.handler, kube=kube, watch_kube=watch_kube, events=events, workers=workers, operations=operations
        )
        self.handler.queue_flush = self.pods.queue.add  # a probe verdict changed: flush that Pod
        self.node = NodeController(
            self.handler,
            kube=kube,
            node_ip=node_ip,
            node_dns_name=node_dns_name,
            kubelet_port=kubelet_port,
            events=events,
            renew_interval=lease_renew_interval,
        )

    def start(self) -> None:
        self.node.start()
        self.pods.start()
        self.handler.prober.start()

    def stop(self, timeout: float = 30.0) -> list[threading.Thread]:
        """Stop intake; in-flight provider calls finish (`timeout` bounds the whole stop).
        Returns the threads still busy then."""
        deadline = time.monotonic() + timeout
        busy = self.handler.prober.stop(min(timeout, 5.0))  # a running probe ends within its timeout
        busy += self.pods.stop(max(0.0, deadline - time.monotonic()))
        self.handler.ephemerals.close()  # their processes end, their kept output leaves the process's budget
        return busy + self.node.stop(max(0.0, deadline - time.monotonic()))
