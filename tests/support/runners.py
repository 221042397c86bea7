"""In-process virtual nodes for tests: a `Runner` for one provider on an embedded cluster, with
the short intervals tests want, so every rig starts its nodes the same way.

Used by the vnode, kubelet, placement, console and ssh rigs. Builds only; the caller starts
and stops the Runner (or uses the `start_runner` fixture of tests/vnode).
"""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from nebula_site.process import watch_pool_size
from providers.base import Provider
from tests.support.fixtures import kube_for
from vnode.runner import Runner

RUNNER_OPTIONS: dict[str, Any] = {
    "node_ip": "127.0.0.1",
    "kubelet_port": 10250,
    "poll_interval": 0.2,
    "lease_renew_interval": 0.3,
    "workers": 4,
}


def make_runner(cluster: DevCluster, provider: Provider, **overrides: Any) -> Runner:
    """A Runner for `provider` with clients of its own on `cluster`; `overrides` replace the
    test defaults in RUNNER_OPTIONS (and the clients, `kube`/`watch_kube`) or add any other
    Runner option (e.g. `blocklister`)."""
    clients = {"kube": kube_for(cluster), "watch_kube": kube_for(cluster, pool_size=watch_pool_size(1))}
    return Runner(provider, **{**clients, **RUNNER_OPTIONS, **overrides})
