"""Fixtures for the kubelet API: a Listeners on ephemeral loopback ports, Handlers over
the fake provider (no cluster needed), and an end-to-end rig shared by a module: the
embedded API server, an in-process Runner on the local provider, the server, one Pod."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devcluster import DevCluster
from tests.support.clients.kubectl import Rig
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.offline import serving_fake
from tests.support.rigs.vnode import loopback_listeners, runner_with_pod
from tests.support.servers.tls import https_get
from vnode.handler import Handler
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import Listeners


@pytest.fixture(scope="module")
def registry() -> HandlerRegistry:
    return HandlerRegistry()


@pytest.fixture(scope="module")
def server(registry: HandlerRegistry) -> Iterator[Listeners]:
    with loopback_listeners(registry) as running:
        yield running


@pytest.fixture(scope="module")
def fake_handler(registry: HandlerRegistry) -> Iterator[Handler]:
    scenario = {
        "log": {"interval": 0.05},
        "exec": {"commands": {"both": {"stdout": "to-stdout\n", "stderr": "to-stderr\n", "exit_code": 3}}},
    }
    yield from serving_fake(registry, "kubelet", scenario)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, registry: HandlerRegistry, server: Listeners) -> Iterator[Rig]:
    from providers.local import LocalProvider

    folder = tmp_path_factory.mktemp("rig")
    kubeconfig = str(folder / "kubeconfig")
    provider = LocalProvider("local", {"state_dir": str(folder / "state"), "grace_period": 1})
    with DevCluster(kubeconfig_path=kubeconfig, scheduler_interval=0.05) as cluster:
        script = "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"
        pod = make_pod("talker", "local", command=("sh", "-c", script))
        with runner_with_pod(cluster, provider, registry, server.kubelet_port, pod) as (runner, _):
            logs = "/containerLogs/default/talker/main"
            wait_for(lambda: https_get(server.kubelet_port, logs)[2].count(b"\n") >= 15, 60, 0.2)  # 3 s of backlog
            yield Rig(cluster, server, runner, kubeconfig, "talker")
