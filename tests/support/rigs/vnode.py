"""Rigs the vnode and provider tests share: a VM's user-data run on this machine (started
for a Pod, then told to stop and reaped), the kubelet API's Listeners on loopback ports,
and a Runner serving one Pod. Used by the SSH usage tests and the kubelet tests' fixtures;
each starts nothing before it is entered and leaves nothing running after."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from devcluster import DevCluster
from kube.client import Kube, path_for
from providers.base import PodSpec, Provider
from tests.providers.aws.vm_script import Vm, render
from tests.support.fixtures import kube_for
from tests.support.pods import phase_of
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners
from vnode.runner import Runner


@contextmanager
def user_data_running(vm: Vm, pod: PodSpec) -> Iterator[subprocess.Popen[bytes]]:
    """The Pod's user-data running in `vm`; on exit its stop file is touched and it is reaped."""
    script = vm.start(render(vm, pod))
    try:
        yield script
    finally:
        Path(f"{vm.order}.stop").touch()
        try:
            script.wait(60)
        except subprocess.TimeoutExpired:
            script.send_signal(signal.SIGKILL)
            script.wait(10)
        assert script.stderr is not None
        script.stderr.close()


@contextmanager
def loopback_listeners(registry: HandlerRegistry, bounds: Limits | None = None) -> Iterator[Listeners]:
    """The kubelet and console listeners serving `registry` on 127.0.0.1, ephemeral ports,
    with `bounds` (the default Limits when None); stopped on exit."""
    from nebula_site.asgi import application

    running = Listeners(
        registry,
        kubelet=ListenerConfig("127.0.0.1", 0),
        node_ip="127.0.0.1",
        console=ListenerConfig("127.0.0.1", 0),
        console_app=application,
        bounds=bounds,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


@contextmanager
def runner_with_pod(
    cluster: DevCluster, provider: Provider, registry: HandlerRegistry, kubelet_port: int, pod: dict[str, Any]
) -> Iterator[tuple[Runner, Kube]]:
    """A Runner for `provider` on `cluster`, its Handler in `registry`, and `pod` (in the
    default namespace) Running; on exit the Handler leaves, the Runner stops and every
    instance of `provider` is terminated."""
    runner = make_runner(cluster, provider, kubelet_port=kubelet_port, lease_renew_interval=0.5)
    runner.start()
    registry.add(runner.handler)
    kube = kube_for(cluster)
    kube.create(path_for("pods", namespace="default"), pod)
    wait_for(lambda: phase_of(kube, pod["metadata"]["name"]) == "Running", 60)
    try:
        yield runner, kube
    finally:
        registry.remove(runner.handler)
        runner.stop(timeout=10)
        for instance in provider.list():
            provider.terminate(instance.id)
