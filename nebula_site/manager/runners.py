"""The one place a `vnode.runner.Runner` is constructed (`build_runner`), from the process's
`RunnerOptions` and the per-Runner pieces; and how many connections the shared write and watch
clients need.

Called by `leading.Leading` (the manager, static or shared providers) and by the tests' rigs and
the benches, so every Runner is built alike. Imports no Django: benches use it before set-up.
Tests: tests/vnode/test_restart.py, tests/nebula_site/test_manager.py.
"""

from __future__ import annotations

from collections.abc import Iterable

from kube.client import Kube
from kube.leases import node_lease
from kube.operations import OperationLimits
from kube.sharing import Term
from nebula_site.manager import config as manager_config
from providers.base import Provider
from vnode import podcontroller
from vnode.blocklister import Blocklister
from vnode.ephemeral import budget as ephemeral_budget
from vnode.fencing import fenced
from vnode.poolpolicy import PoolPolicies
from vnode.runner import Runner


def build_runner(
    provider: Provider,
    options: manager_config.RunnerOptions,
    *,
    kube: Kube,
    watch_kube: Kube,
    blocklister: Blocklister | None = None,
    pools: PoolPolicies | None = None,
    operations: OperationLimits | None = None,
    term: Term | None = None,
) -> Runner:
    """The Runner of `provider` (not started); with a `term` (providers shared out), its API
    writes and its provider's mutations pass only while the term is valid."""
    if term is not None:
        kube = kube.fenced(term.check)
        provider = fenced(provider, term.valid, node_lease(provider.name))
    return Runner(
        provider,
        kube=kube,
        watch_kube=watch_kube,
        node_ip=options.node_ip,
        node_dns_name=options.node_dns_name,
        kubelet_port=options.kubelet_port,
        poll_interval=options.poll_interval,
        lease_renew_interval=options.lease_renew_interval,
        blocklister=blocklister,
        pools=pools,
        workers=options.workers,
        backoff=options.backoff,
        probe_workers=options.probe_workers,
        operations=operations,
        output_budget=process_output_budget(options),
    )


def process_output_budget(options: manager_config.RunnerOptions) -> ephemeral_budget.OutputBudget:
    """The process's one budget of kept ephemeral output, at the configured limit: every
    Runner of this process shares it (`NEBULA['EPHEMERAL_OUTPUT_BUDGET']`)."""
    budget = ephemeral_budget.PROCESS_BUDGET
    if budget.limit != options.ephemeral_output_budget:
        budget.set_limit(options.ephemeral_output_budget)
    return budget


def api_pool_size(operations: Iterable[OperationLimits], workers: int) -> int:
    """Connections for the client every write shares: each provider's operations in flight
    (`concurrency`) and pod workers, and a margin for placement, the Event flushers and the
    leases. urllib3 opens more when they all write at once, but a pool smaller than that closes
    each extra connection after its one request, and the next write pays a new TCP connection
    and TLS handshake (py-spy of `bench/sync.py --pods 10000`: a quarter of the manager's time)."""
    return 16 + sum(limits.concurrency + workers for limits in operations)


def watch_pool_size(providers: int) -> int:
    """Connections for the client every watch shares: each virtual node's Pod watch and its
    Secret/ConfigMap watches (at most MAX_SOURCE_WATCHES), placement's two, and a margin.
    A smaller pool still works (urllib3 opens more) but drops and re-opens a connection per
    overflowing watch, with a warning each time."""
    return 8 + providers * (1 + podcontroller.MAX_SOURCE_WATCHES)
