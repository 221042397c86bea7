"""The composition root (`nebula_site.manager`): the ordered shutdown shares one grace, and the
leading loop (`main.lead`) leads, publishes Runners, placement and the mirror to the console,
and on stop clears it all and gives the Lease up."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from console import leaderpeer, runtime
from console import observer as console_observer
from devcluster import DevCluster
from kube.client import Kube, path_for
from nebula_site.manager import config as manager_config
from nebula_site.manager import main, shutdown
from providers.fake import FakeProvider
from tests.support.clock import ManualClock
from tests.support.polling import wait_for
from vnode.kubelet.resolve import HandlerRegistry


def step(clock: ManualClock, takes: float, given: list[float], busy: list[threading.Thread]) -> shutdown.Stopper:
    def run(timeout: float) -> list[threading.Thread]:
        given.append(timeout)
        clock.now += min(takes, timeout)
        return busy

    return run


@pytest.mark.parametrize(
    ("takes", "expected"),
    [
        ([1.0, 2.0, 3.0], [10.0, 9.0, 7.0]),  # each step gets what the earlier ones left
        ([6.0, 6.0, 6.0], [10.0, 4.0, 0.0]),  # the grace runs out: later steps get 0, never less
    ],
)
def test_stop_in_order_shares_one_grace_and_names_what_is_left(takes: list[float], expected: list[float]) -> None:
    clock = ManualClock(100.0)
    given: list[float] = []
    left = threading.Thread(name="stuck")
    steps = [step(clock, t, given, [left] if i == 1 else []) for i, t in enumerate(takes)]
    assert shutdown.stop_in_order(steps, 10.0, monotonic=clock) == [left]
    assert given == expected
    assert clock.now - 100.0 <= 10.0


CONSOLE = leaderpeer.Peer("https://127.0.0.1:8443", "ab" * 32)


def test_lead_publishes_to_the_console_and_clears_it_all_on_stop(db: Any, cluster: DevCluster, kube: Kube) -> None:
    assert cluster.kubeconfig_path is not None
    provider = FakeProvider("wired", {"cloud": f"process-{uuid.uuid4().hex[:8]}"})
    registry = HandlerRegistry()
    stop = threading.Event()
    result: list[bool] = []
    seen: list[str] = []

    def build(cluster: str) -> dict[str, FakeProvider]:
        seen.append(cluster)
        return {"wired": provider}

    config = manager_config.ManagerConfig(
        providers={},
        aliases=("wired",),
        runner=manager_config.RunnerOptions(node_ip="127.0.0.1", kubelet_port=0),
        kubelet_addr=("127.0.0.1", 0),
        console_addr=("127.0.0.1", 0),
        kubeconfig=cluster.kubeconfig_path,
        namespace="default",
        shutdown_grace=5.0,
    )

    def run() -> None:
        stops = shutdown.Shutdown(config.shutdown_grace)
        try:
            result.append(
                main.lead(
                    config,
                    stop,
                    stops,
                    registry=registry,
                    kubelet_port=10250,
                    console=CONSOLE,
                    build_providers=build,
                )
            )
        finally:
            stops.run()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        current = wait_for(lambda: runtime.current() if runtime.current().handlers else None)
        assert [h.node_name for h in current.handlers] == ["nebula-wired"]
        # Unnamed, the cluster is the kube-system Namespace's UID: stable, and unlike another cluster's.
        assert seen == [kube.get(path_for("namespaces", name="kube-system"))["metadata"]["uid"]]
        assert current.placement is not None and current.blocklist is current.placement.blocklist
        assert registry.handlers() == list(current.handlers)
        assert console_observer.installed() is not None
        lease = kube.get(path_for("leases", namespace="default", name=main.LEADER_LEASE, group="coordination.k8s.io"))
        assert lease["spec"]["holderIdentity"]
        assert leaderpeer.peer_from(lease["metadata"]["annotations"]) == CONSOLE  # where standbys forward
        assert not runtime.forwards()  # the leader answers its console itself
    finally:
        stop.set()
        thread.join(30)
    assert result == [True]
    assert runtime.current().handlers == () and runtime.current().placement is None
    assert console_observer.installed() is None
    lease = kube.get(path_for("leases", namespace="default", name=main.LEADER_LEASE, group="coordination.k8s.io"))
    assert lease["spec"]["holderIdentity"] == ""
    assert lease["metadata"].get("annotations") in (None, {})  # released: it names no console any more
    assert not runtime.forwards()  # nothing of the process is left to forward through
