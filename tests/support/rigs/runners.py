"""In-process virtual nodes for tests: a `Runner` for one provider on an embedded cluster, with
the short intervals tests want, built by the manager's one `build_runner` so every rig starts
its nodes as the manager does.

Used by the vnode, kubelet, placement, console and ssh rigs. Builds only; the caller starts
and stops the Runner (or uses the `start_runner` fixture of tests/vnode).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from devcluster import DevCluster
from nebula_site.manager import config as manager_config
from nebula_site.manager import runners as manager_runners
from providers.base import Provider
from tests.support.fixtures import kube_for
from vnode.runner import Runner

RUNNER_OPTIONS = manager_config.RunnerOptions(
    node_ip="127.0.0.1", kubelet_port=10250, poll_interval=0.2, lease_renew_interval=0.3, workers=4
)
_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(manager_config.RunnerOptions))


def make_runner(cluster: DevCluster, provider: Provider, **overrides: Any) -> Runner:
    """A Runner for `provider` with clients of its own on `cluster`; `overrides` replace the
    test defaults in RUNNER_OPTIONS (and the clients, `kube`/`watch_kube`) or add any other
    `build_runner` argument (e.g. `blocklister`, `pools`, `operations`)."""
    options = dataclasses.replace(RUNNER_OPTIONS, **{k: v for k, v in overrides.items() if k in _OPTION_NAMES})
    clients = {"kube": kube_for(cluster), "watch_kube": kube_for(cluster, pool_size=manager_runners.watch_pool_size(1))}
    rest = {k: v for k, v in overrides.items() if k not in _OPTION_NAMES}
    return manager_runners.build_runner(provider, options, **{**clients, **rest})
