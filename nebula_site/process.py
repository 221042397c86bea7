"""The process wiring: the one place that constructs Nebula's pieces and connects them.

Called by `manage.py runvnode` (`start_listeners`, `start_serving_csr`, `start_metrics_listener`,
then `run`):
leader election (the leader
publishing its console's address on the Lease, a standby forwarding console requests to it),
one Runner per provider (the leader's, or with shared providers each replica's share of them,
`nebula_site.sharing`), the kubelet registry, placement, the console's runtime and mirror,
and the ordered shutdown within one grace. Never parses arguments or reads settings.

Invariant: shutdown takes at most one grace, each step getting what the earlier ones left; see
tests/nebula_site/test_process.py::test_stop_in_order_shares_one_grace_and_names_what_is_left.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from console import kubeauth, leaderpeer, runtime
from console import observer as console_observer
from console.exporter import MetricsListener
from console.mirror import Mirror
from kube.client import Kube, KubeError, load_api_client, path_for
from kube.leader import LeaderElector
from kube.leases import SharedLeases, node_lease
from kube.operations import OperationLimits
from kube.reviews import Reviewer
from kube.sharing import Sharing, Term
from kube.worker import describe
from placement.blocklist import Blocklist
from placement.poolcache import PoolCache
from placement.wiring import Placement
from providers.base import Provider
from vnode import podcontroller
from vnode.blocklister import Blocklister
from vnode.fencing import fenced
from vnode.kubelet import auth as kubeletauth
from vnode.kubelet import certcsr
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners
from vnode.poolpolicy import PoolPolicies
from vnode.prober import DEFAULT_WORKERS as DEFAULT_PROBE_WORKERS
from vnode.runner import Runner
from vnode.runs import DEFAULT_BACKOFF, BackoffPolicy

logger = logging.getLogger(__name__)

LEADER_LEASE = "nebula-manager"
# In-flight work gets this long in all after SIGTERM; the Deployment's grace period is 45 s,
# which leaves time to release the Lease and stop the listeners before a SIGKILL.
SHUTDOWN_GRACE = 20.0

Stopper = Callable[[float], list[threading.Thread]]
ProviderFactory = Callable[[str], Mapping[str, Provider]]  # cluster identity -> providers by alias
IDENTITY_RETRY = 2.0  # seconds between reads of the kube-system Namespace while the API does not answer
LEASE_DURATION = 15.0  # seconds; renewals must succeed within 2/3 of it, tried every 2/15 (client-go's 15/10/2)


def cluster_identity(
    kube: Kube, configured: str | None, stop: threading.Event, *, retry: float = IDENTITY_RETRY
) -> str | None:
    """Who this cluster is, for instance ownership: `configured` (`--cluster-name`,
    `NEBULA['CLUSTER_NAME']`), else the UID of the `kube-system` Namespace, which is stable
    for the cluster's life and differs between clusters. Waits for the API server (None if
    `stop` comes first): guessing would let this manager see another cluster's instances."""
    if configured:
        return configured
    while not stop.is_set():
        try:
            uid = str(kube.get(path_for("namespaces", name="kube-system"))["metadata"]["uid"])
        except (KubeError, KeyError, TypeError) as exc:
            logger.warning("cannot read the kube-system Namespace for the cluster identity (retrying): %s", exc)
        else:
            if uid:
                return uid
        stop.wait(retry)
    return None


def start_serving_csr(
    listeners: Listeners, kubeconfig: str | None, aliases: Sequence[str], node_ip: str | None, node_dns_name: str | None
) -> certcsr.CsrCertificates:
    """The kubelet listener's certificate from the CSR API (`certcsr`), started. One CSR for
    the listener, named for the first virtual node, `nebula-<first alias>` (every node
    publishes the same address). Raises ValueError when there is no address to name."""
    node_name = f"nebula-{aliases[0]}"
    if not node_ip and not node_dns_name:
        raise ValueError("the csr certificate source needs --node-ip or --node-dns-name (the certificate's SANs)")
    assert listeners.kubelet_tls is not None, "the listeners are started"
    request = certcsr.CsrRequest(node_name, (node_ip,) if node_ip else (), (node_dns_name,) if node_dns_name else ())
    manager = certcsr.CsrCertificates(Kube(load_api_client(kubeconfig, pool_size=2)), listeners.kubelet_tls, request)
    manager.start()
    return manager


def start_listeners(
    kubelet: tuple[str, int],
    console: tuple[str, int],
    *,
    node_ip: str | None,
    client_ca: str | None,
    kubelet_cert: tuple[str, str] | None = None,
    kubelet_auth: KubeletAuthOptions,
    console_tls: bool,
    console_cert: tuple[str, str] | None,
    console_ca_path: str,
    console_optional: bool,
    bounds: Limits | None = None,
) -> Listeners:
    """The kubelet listener (TLS) and the console listener, on one Daphne server, started.
    Raises what binding raises (OSError, ValueError for certificates or an inconsistent
    `kubelet_auth`, Twisted's errors)."""
    from nebula_site.asgi import application  # builds the Django app: only once settings are read

    listeners = Listeners(
        HandlerRegistry(),
        kubelet=ListenerConfig(*kubelet),
        node_ip=node_ip,
        client_ca=client_ca,
        kubelet_cert=kubelet_cert,
        kubelet_auth=kubelet_auth.build(),
        console=ListenerConfig(*console),
        console_app=application,
        console_tls=console_tls or console_cert is not None,
        console_cert=console_cert,
        console_ca_path=console_ca_path,
        console_optional=console_optional,
        bounds=bounds,
    )
    listeners.start()
    return listeners


@dataclass(frozen=True)
class KubeletAuthOptions:
    """Who may use the kubelet API, as configured (`runvnode`'s flags over NEBULA settings);
    `build` makes the listener's `auth.KubeletAuth`, with a client of the API server at
    `kubeconfig` (in-cluster when None) for TokenReview and SubjectAccessReview."""

    anonymous: bool = False
    token_auth: bool = True
    authorization: str = kubeletauth.WEBHOOK
    kubeconfig: str | None = None

    def build(self) -> kubeletauth.KubeletAuth:
        needs_api = self.token_auth or self.authorization == kubeletauth.WEBHOOK
        kube = Kube(load_api_client(self.kubeconfig, pool_size=kubeletauth.REVIEW_WORKERS)) if needs_api else None
        return kubeletauth.KubeletAuth(
            anonymous=self.anonymous, authorization=self.authorization, token_auth=self.token_auth, kube=kube
        )


def start_metrics_listener(
    metrics: tuple[str, int], *, cert: tuple[str, str] | None, token_auth: bool, kubeconfig: str | None
) -> MetricsListener:
    """The metrics listener (`console.exporter`), started: plain HTTP, or TLS with `cert`;
    with `token_auth`, scrapers' tokens are reviewed by the API server of `kubeconfig`.
    Serves whether or not this process leads. Raises what binding or loading the certificate
    raises (OSError, ssl.SSLError)."""
    reviewer = Reviewer(Kube(load_api_client(kubeconfig, pool_size=4))) if token_auth else None
    listener = MetricsListener(*metrics, cert=cert, reviewer=reviewer)
    listener.start()
    return listener


def advertised_console(listeners: Listeners, *, bind_host: str, node_ip: str | None) -> leaderpeer.Peer | None:
    """Where other replicas reach this console: the bound address, or the node IP when bound to
    every interface; pinned to the served certificate over TLS. None when it is not served or
    has no address to name."""
    port = listeners.console_port
    host = bind_host if bind_host not in ("", "0.0.0.0", "::") else (node_ip or "")
    if port is None or not host:
        return None
    fingerprint = listeners.console_fingerprint
    return leaderpeer.Peer(leaderpeer.console_url(tls=fingerprint is not None, host=host, port=port), fingerprint)


def stop_in_order(
    steps: Sequence[Stopper], grace: float, *, monotonic: Callable[[], float] = time.monotonic
) -> list[threading.Thread]:
    """Run each step with the seconds left of `grace` (never negative); returns every thread
    a step left busy, so the caller can name them."""
    deadline = monotonic() + grace
    busy: list[threading.Thread] = []
    for step in steps:
        busy += step(max(0.0, deadline - monotonic()))
    return busy


@dataclass
class Leading:
    """What runs while this process leads, started by `start` and stopped by `stop_steps`."""

    providers: Mapping[str, Provider]
    registry: HandlerRegistry
    blocklist: Blocklist
    node_ip: str | None
    kubelet_port: int
    poll_interval: float | None
    lease_renew_interval: float
    backoff: BackoffPolicy = DEFAULT_BACKOFF
    node_dns_name: str | None = None
    probe_workers: int = DEFAULT_PROBE_WORKERS
    operations: Mapping[str, OperationLimits] = field(default_factory=dict)  # alias -> limits
    runners: list[Runner] = field(default_factory=list)
    placement: Placement | None = None
    mirror: Mirror | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _publishing: bool = False  # the console reads this process's Runners (it leads)

    def build_runner(
        self, alias: str, *, kube: Kube, watch_kube: Kube, pools: PoolPolicies | None, term: Term | None = None
    ) -> Runner:
        """The Runner of provider `alias`; with a `term` (providers shared out), its API writes
        and its provider's mutations pass only while the term is valid."""
        provider = self.providers[alias]
        if term is not None:
            kube = kube.fenced(term.check)
            provider = fenced(provider, term.valid, node_lease(alias))
        # The one place the two siblings meet: placement's Blocklist is what the vnode reports
        # refusals to, by structure alone (vnode never imports placement); mypy checks it here.
        blocklister: Blocklister = self.blocklist
        return Runner(
            provider,
            kube=kube,
            watch_kube=watch_kube,
            node_ip=self.node_ip,
            node_dns_name=self.node_dns_name,
            kubelet_port=self.kubelet_port,
            poll_interval=self.poll_interval,
            lease_renew_interval=self.lease_renew_interval,
            blocklister=blocklister,
            pools=pools,
            backoff=self.backoff,
            probe_workers=self.probe_workers,
            operations=self.operations.get(alias),
        )

    def start(self, kube: Kube, watch_kube: Kube, *, shared: Sharing | None = None) -> None:
        """Runners first (the nodes appear), then what serves and reads their Handlers. With
        `shared`, the Runners are the sharing loop's: placement, the mirror and the console only."""
        # Placement's pool cache is what the Handlers read a pool's egress and provisioning
        # timeout from; it is built now and started after the Runners.
        placement = Placement(self.providers, kube=kube, watch_kube=watch_kube, blocklist=self.blocklist)
        pools: PoolPolicies = placement.pools
        if shared is None:
            self.runners = [
                self.build_runner(alias, kube=kube, watch_kube=watch_kube, pools=pools) for alias in self.providers
            ]
            for runner in self.runners:
                runner.start()
                logger.info("virtual node %s started", runner.handler.node_name)
            self.registry.add_all([r.handler for r in self.runners])
        placement.start()
        self.placement = placement
        self._publishing = True
        self.runners_changed(self.runners if shared is None else shared.runners())
        runtime.set_leading(True)  # the console serves from here on, and standbys forward here
        self.mirror = Mirror()
        self.mirror.start()

    def runners_changed(self, runners: Sequence[Runner]) -> None:
        """The Runners serving here now: the kubelet registry follows, and the console while leading."""
        handlers = [r.handler for r in runners]
        with self._lock:
            for gone in set(self.registry.handlers()) - set(handlers):
                self.registry.remove(gone)
            self.registry.add_all(handlers)
            if self._publishing and self.placement is not None:
                runtime.install(handlers=handlers, placement=self.placement)

    def stop_steps(self) -> list[Stopper]:
        """Placement first (no new placements), then the mirror and the console's registry,
        then the Runners (their in-flight provider calls finish)."""
        return [self._stop_placement, self._stop_mirror, *(runner.stop for runner in self.runners)]

    def _stop_placement(self, timeout: float) -> list[threading.Thread]:
        placement, self.placement = self.placement, None  # once: a later start builds a new one
        return placement.stop(timeout) if placement is not None else []

    def _stop_mirror(self, timeout: float) -> list[threading.Thread]:
        mirror, self.mirror = self.mirror, None
        busy = mirror.stop(timeout) if mirror is not None else []
        runtime.set_leading(False)
        with self._lock:
            self._publishing = False
            runtime.clear()
        return busy


def watch_pool_size(providers: int) -> int:
    """Connections for the client every watch shares: each virtual node's Pod watch and its
    Secret/ConfigMap watches (at most MAX_SOURCE_WATCHES), placement's two, and a margin.
    A smaller pool still works (urllib3 opens more) but drops and re-opens a connection per
    overflowing watch, with a warning each time."""
    return 8 + providers * (1 + podcontroller.MAX_SOURCE_WATCHES)


def run(
    build_providers: ProviderFactory,
    *,
    aliases: Sequence[str],
    cluster_name: str | None,
    registry: HandlerRegistry,
    kubeconfig: str | None,
    node_ip: str | None,
    kubelet_port: int,
    namespace: str,
    stop: threading.Event,
    poll_interval: float | None = None,
    leader_election: bool = True,
    lease_renew_interval: float = 10.0,
    shutdown_grace: float = SHUTDOWN_GRACE,
    backoff: BackoffPolicy = DEFAULT_BACKOFF,
    node_dns_name: str | None = None,
    probe_workers: int = DEFAULT_PROBE_WORKERS,
    operations: Mapping[str, OperationLimits] | None = None,
    console: leaderpeer.Peer | None = None,
    lease_duration: float = LEASE_DURATION,
    on_leading: Callable[[], None] | None = None,
    share_providers: bool = False,
) -> bool:
    """Run until `stop`. Returns False if leadership was lost (the caller should exit
    non-zero so the Deployment restarts it as a standby). Steps:

    1. install the console's observer (metrics and the dashboard's Events see the loops), its
       token Reviewer (Kubernetes logins, on this manager's own client) and, with leader
       election, the console's leader locator: until this process leads, its console
       forwards to the one whose Lease names `console` (`advertised_console`);
    2. wait for the leader Lease (unless `leader_election` is off); a stop while waiting ends here;
    3. as leader, learn the cluster identity (`cluster_identity`) and build the providers
       owned by it (`build_providers`), then start `Leading` (Runners, registry, placement,
       runtime, mirror) and call `on_leading` (the console now serves this process's memory);
    4. keep the Lease (or wait for `stop`);
    5. stop within `shutdown_grace` seconds in all (`stop_in_order`): work still in flight then
       is abandoned and named in the log; a provider call cut short is redone safely by the
       next leader, as claims make provisioning idempotent;
    6. release the Lease and uninstall the observer and the locator.

    With `share_providers` (and leader election), the Runners are not the leader's: from
    before step 2 every replica serves its share of the providers (`nebula_site.sharing`, on
    node Leases), and leading adds placement, the mirror and the console; a replica that loses
    the leader Lease stands by again instead of exiting (`_lead_while_sharing`), and `run`
    returns True.
    """
    console_observer.install()
    try:
        kube = Kube(load_api_client(kubeconfig))
        watch_kube = Kube(load_api_client(kubeconfig, pool_size=watch_pool_size(len(aliases))))
        kubeauth.install(Reviewer(kube))  # Kubernetes token logins, on a standby too
        identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        elector = LeaderElector(
            kube,
            namespace=namespace,
            name=LEADER_LEASE,
            identity=identity,
            lease_duration=lease_duration,
            renew_deadline=lease_duration * 2 / 3,
            retry_period=lease_duration * 2 / 15,
            annotations=leaderpeer.lease_annotations(console),
        )
        if leader_election:
            locator = leaderpeer.LeaseLocator(kube, namespace=namespace, name=LEADER_LEASE, identity=identity)
            runtime.install_locator(locator)
        blocklist = Blocklist()

        def make_leading(providers: Mapping[str, Provider]) -> Leading:
            return Leading(
                providers,
                registry,
                blocklist,
                node_ip=node_ip,
                kubelet_port=kubelet_port,
                poll_interval=poll_interval,
                lease_renew_interval=lease_renew_interval,
                backoff=backoff,
                node_dns_name=node_dns_name,
                probe_workers=probe_workers,
                operations=operations or {},
            )

        if share_providers and leader_election:
            cluster = cluster_identity(kube, cluster_name, stop)
            if cluster is None:
                return True
            providers = build_providers(cluster)
            pools = PoolCache(kube, watch_kube)  # the Runners' own: placement's runs only while leading
            pools.start()
            leading = make_leading(providers)
            leases = SharedLeases(
                kube, namespace=namespace, identity=identity, duration=lease_duration, margin=lease_duration / 3
            )

            def build(alias: str, term: Term) -> Runner:
                return leading.build_runner(alias, kube=kube, watch_kube=watch_kube, pools=pools, term=term)

            sharing = Sharing(
                leases,
                list(providers),
                build,
                retry=lease_duration * 2 / 15,
                stop_timeout=shutdown_grace,
                on_change=leading.runners_changed,
            )
            sharing.start()
            logger.info("cluster identity %s; serving a share of the providers (lease %s)", cluster, identity)
            _lead_while_sharing(elector, leading, sharing, kube, watch_kube, stop, shutdown_grace, on_leading)
            logger.info("stopping: no new work; letting in-flight calls finish (at most %.0fs)", shutdown_grace)
            _stop_shared(sharing, pools, leading.stop_steps(), shutdown_grace)
            elector.release()
            return True
        if leader_election and not elector.acquire(stop):
            return True
        cluster = cluster_identity(kube, cluster_name, stop)
        if cluster is None:
            elector.release()
            return True
        logger.info("cluster identity %s: only instances owned by it are listed, adopted or swept", cluster)
        leading = make_leading(build_providers(cluster))
        leading.start(kube, watch_kube)
        if on_leading is not None:
            on_leading()
        kept = True
        if leader_election:
            elector.keep(stop)
            kept = stop.is_set()
        else:
            stop.wait()
        logger.info("stopping: no new work; letting in-flight calls finish (at most %.0fs)", shutdown_grace)
        busy = stop_in_order(leading.stop_steps(), shutdown_grace)
        if busy:
            logger.warning("stopped with work still in flight after %.0fs: %s", shutdown_grace, describe(busy))
        elector.release()
        return kept
    finally:
        runtime.install_locator(None)
        runtime.set_leading(False)
        kubeauth.uninstall()
        console_observer.uninstall()


def _lead_while_sharing(
    elector: LeaderElector,
    leading: Leading,
    sharing: Sharing,
    kube: Kube,
    watch_kube: Kube,
    stop: threading.Event,
    grace: float,
    on_leading: Callable[[], None] | None,
) -> None:
    """Lead whenever this replica holds the leader Lease, until `stop`. Losing it stops
    placement, the mirror and the console here, and this replica stands by again: its share of
    the providers is served on its node Leases all along, so nothing exits."""
    while elector.acquire(stop):
        leading.start(kube, watch_kube, shared=sharing)
        if on_leading is not None:
            on_leading()
        elector.keep(stop)
        if stop.is_set():
            return
        logger.error("lost the leader lease: placement, the mirror and the console stop here; standing by")
        busy = stop_in_order(leading.stop_steps(), grace)
        if busy:
            logger.warning("placement and the mirror stopped with work in flight: %s", describe(busy))


def _stop_shared(sharing: Sharing, pools: PoolCache, steps: Sequence[Stopper], grace: float) -> None:
    """Stop what leads (`steps`), then the shared Runners (their Leases released as each
    stops), then the Runners' pool cache; all within `grace`."""

    def stop_pools(timeout: float) -> list[threading.Thread]:
        pools.stop()
        return []

    busy = stop_in_order([*steps, sharing.stop, stop_pools], grace)
    if busy:
        logger.warning("stopped with work still in flight after %.0fs: %s", grace, describe(busy))


def listener_limits(configured: dict[str, Any], *, creation: float | None, idle: float | None) -> Limits:
    """NEBULA['LISTENER_LIMITS'] over the defaults, then runvnode's timeout flags (when given).
    ValueError names a bad key or value."""
    values = dict(configured)
    if creation is not None:
        values["stream_creation_timeout"] = creation
    if idle is not None:
        values["stream_idle_timeout"] = idle
    return Limits.from_mapping(values)
