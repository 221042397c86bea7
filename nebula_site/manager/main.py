"""The manager process: `main(config, stop)` starts everything in order, runs the one leading
loop, and stops everything in one ordered stop (Runners, placement, mirror, the leader Lease,
the console's runtime, the CSR manager, the exporter, the listeners, the embedded cluster and,
with it, the instances of its Pods).

Called by `manage.py runvnode` once it parsed and validated its flags; `lead` is the loop alone,
for tests. Never parses flags and never reads settings.
Tests: tests/nebula_site/test_manager.py, tests/vnode/test_invariants.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from console import kubeauth, leaderpeer, runtime
from console import observer as console_observer
from kube.client import Kube, load_api_client
from kube.leader import LeaderElector
from kube.operations import OperationLimits
from kube.reviews import Reviewer
from kube.worker import describe
from nebula_site.manager import config as manager_config
from nebula_site.manager import devteardown, replica, sources, startup
from nebula_site.manager import leading as manager_leading
from nebula_site.manager import listeners as manager_listeners
from nebula_site.manager import runners as manager_runners
from nebula_site.manager import shutdown as manager_shutdown
from placement.blocklist import Blocklist
from placement.blockstore import Blockstore
from providers.base import Provider
from vnode.kubelet.resolve import HandlerRegistry

logger = logging.getLogger(__name__)

LEADER_LEASE = "nebula-manager"


def main(
    config: manager_config.ManagerConfig,
    stop: threading.Event,
    *,
    build_providers: sources.ProviderFactory,
    say: startup.Say = print,
    start_cluster: Callable[[manager_config.Address], startup.EmbeddedCluster] | None = None,
) -> bool:
    """Run the manager until `stop`. Returns False if leadership was lost (the caller should
    exit non-zero so the Deployment restarts it as a standby). Steps, each one's stop pushed
    on the ordered stop as it starts:

    1. the kubeconfig check, or with `config.dev_cluster` the embedded cluster (`start_cluster`:
       the commands alone may import it), started first: the kubelet listener reviews tokens
       with it and trusts its client CA;
    2. the kubelet and console listeners, the console's tables, on the embedded cluster what the
       base install registers (`devinstall`), the CSR manager, the exporter;
    3. the virtual nodes said; a stop by now ends here;
    4. the leading loop (`lead`); once leading, the `--demo` Pod and login (`demo_on_leading`);
    5. everything stopped, last started first, within `config.shutdown_grace` in all; with the
       embedded cluster, its providers' instances terminated once the Runners stopped.
    """
    shutdown = manager_shutdown.Shutdown(config.shutdown_grace)
    try:
        if config.dev_cluster is None:
            startup.check_kubeconfig(config.kubeconfig)  # one line, before anything listens or logs
        else:
            assert start_cluster is not None, "runvnode starts the embedded cluster"
            cluster = start_cluster(config.dev_cluster)
            shutdown.push_untimed(cluster.stop)
            if config.dev_client_ca is not None:
                startup.write_client_ca(config.dev_client_ca, cluster.kubelet_client_ca_pem)
        listeners = startup.start_listeners(config, say)
        shutdown.push_untimed(listeners.stop)
        startup.migrate_mirror()
        if config.dev_cluster is not None:
            shutdown.push_untimed(startup.install_on_dev_cluster(config, say).stop)
        if config.kubelet_cert_source == "csr":
            runner = config.runner
            csr = manager_listeners.start_serving_csr(
                listeners, config.kubeconfig, config.aliases, runner.node_ip, runner.node_dns_name
            )
            shutdown.push_untimed(csr.stop)
        exporter = startup.start_metrics(config, say)
        if exporter is not None:
            shutdown.push_untimed(exporter.stop)
        startup.announce(config, say)
        if stop.is_set():
            logger.info("stopped while starting: no virtual node was started")
            return True
        tls = config.console_tls or config.console_cert is not None
        url = manager_listeners.console_url(listeners, bind_host=config.console_addr[0], tls=tls)
        if config.dev_cluster is not None:
            build_providers = _terminated_on_stop(build_providers, shutdown, say)
        return lead(
            config,
            stop,
            shutdown,
            registry=listeners.registry,
            kubelet_port=listeners.kubelet_port,
            console=manager_listeners.advertised_console(
                listeners, bind_host=config.console_addr[0], node_ip=config.runner.node_ip
            ),
            build_providers=build_providers,
            on_leading=startup.demo_on_leading(config, url, say, stop),
        )
    finally:
        shutdown.run()


def _terminated_on_stop(
    build_providers: sources.ProviderFactory, shutdown: manager_shutdown.Shutdown, say: startup.Say
) -> sources.ProviderFactory:
    """`build_providers`, whose providers' instances are terminated on the ordered stop once
    the Runners stopped (pushed before `lead` pushes theirs): the embedded cluster's Pods
    cannot be deleted after it stops (`devteardown`)."""
    built: dict[str, Provider] = {}

    def terminate(timeout: float) -> list[threading.Thread]:
        devteardown.terminate_instances(built, timeout, say=say)
        return []

    shutdown.push(terminate)

    def build(cluster: str) -> Mapping[str, Provider]:
        providers = build_providers(cluster)
        built.update(providers)
        return providers

    return build


def lead(
    config: manager_config.ManagerConfig,
    stop: threading.Event,
    shutdown: manager_shutdown.Shutdown,
    *,
    registry: HandlerRegistry,
    kubelet_port: int,
    console: leaderpeer.Peer | None,
    build_providers: sources.ProviderFactory,
    on_leading: Callable[[], None] | None = None,
) -> bool:
    """The leading loop, until `stop`; its stops go on `shutdown` (the caller runs it). Steps:

    1. install the console's observer (metrics and the dashboard's Events see the loops), its
       token Reviewer (Kubernetes logins, on this manager's own client) and, with leader
       election, the console's leader locator: until this process leads, its console
       forwards to the one whose Lease names `console` (`advertised_console`);
    2. start the blocklist's cluster copy (`placement.blockstore`: every replica writes the
       refusals it sees and watches everyone's into its memory), then prepare the runner source
       (`sources`: with providers shared out, this replica's share is served from now on);
    3. wait for the leader Lease (unless leader election is off); a stop while waiting ends here;
    4. as leader, start `Leading` through the source (static: learn the cluster identity and
       build the providers owned by it first) and call `on_leading`;
    5. keep the Lease (or wait for `stop`); losing it ends the loop with False (static), or
       stops placement, the mirror and the console here and stands by again (shared);
    6. on `stop`, everything stops within one grace: work still in flight then is abandoned
       and named in the log; a provider call cut short is redone safely by the next leader,
       as claims make provisioning idempotent. The Lease is released after the Runners stop.
    """
    console_observer.install()
    shutdown.push_untimed(_uninstall)
    limits = [config.operations.get(alias) or OperationLimits() for alias in config.aliases]
    kube = Kube(
        load_api_client(config.kubeconfig, pool_size=manager_runners.api_pool_size(limits, config.runner.workers))
    )
    watch_kube = Kube(
        load_api_client(config.kubeconfig, pool_size=manager_runners.watch_pool_size(len(config.aliases)))
    )
    kubeauth.install(Reviewer(kube))  # Kubernetes token logins, on a standby too
    identity, holders = replica.replica(kube, config.namespace)
    runtime.set_replica(identity)
    duration = config.lease_duration
    elector = LeaderElector(
        kube,
        namespace=config.namespace,
        name=LEADER_LEASE,
        identity=identity,
        lease_duration=duration,
        renew_deadline=duration * 2 / 3,
        retry_period=duration * 2 / 15,
        annotations=leaderpeer.lease_annotations(console),
        holders=holders,
    )
    shutdown.push_untimed(elector.release)
    if config.leader_election:
        locator = leaderpeer.LeaseLocator(
            kube, namespace=config.namespace, name=LEADER_LEASE, identity=identity, holders=holders
        )
        runtime.install_locator(locator)
    options = manager_leading.with_port(config.runner, kubelet_port)
    blocklist = Blocklist()
    blockstore = Blockstore(blocklist, kube, watch_kube)
    blockstore.start()
    shutdown.push(blockstore.stop)  # after the Runners stop (pushed before them): their last refusals written
    wiring = sources.Wiring(config, kube, watch_kube, registry, blocklist, options, build_providers, blockstore)
    source: sources.RunnerSource = (
        sources.SharedRunners(wiring, identity, holders) if config.shares else sources.StaticRunners(wiring)
    )
    shutdown.push(lambda timeout: manager_shutdown.stop_in_order(source.stop_steps(), timeout))
    kept = True
    ready = source.prepare(stop)
    while ready and not stop.is_set():
        # Before seeking the Lease, not after: between acquiring it and keeping it nothing renews
        # it, so a wait there could outlast the renew deadline and the fence.
        manager_leading.await_blocklist(blockstore, manager_leading.BLOCKLIST_SYNC_WAIT)
        if config.leader_election and not elector.acquire(stop):
            break
        leading = source.lead(stop)
        if leading is None:
            break
        if on_leading is not None:
            on_leading()
        if config.leader_election:
            elector.keep(stop)
        else:
            stop.wait()
        if stop.is_set():
            break
        if not source.stands_by:
            kept = False
            break
        logger.error("lost the leader lease: placement, the mirror and the console stop here; standing by")
        busy = manager_shutdown.stop_in_order(leading.stop_steps(), config.shutdown_grace)
        if busy:
            logger.warning("placement and the mirror stopped with work in flight: %s", describe(busy))
    logger.info("stopping: no new work; letting in-flight calls finish (at most %.0fs)", config.shutdown_grace)
    return kept


def _uninstall() -> None:
    """The process's marks on the console: its leader locator, its role, its Reviewer, its observer."""
    runtime.install_locator(None)
    runtime.set_leading(False)
    kubeauth.uninstall()
    console_observer.uninstall()
