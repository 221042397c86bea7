"""The manager's listeners: the kubelet and console listeners (one Daphne server), the metrics
listener (on the same reactor and bounds), the kubelet certificate from the CSR API, and where
other replicas reach the console.

Started by `nebula_site.manager.main` from a `ManagerConfig`, in that order, each stopped by its
ordered stop. Never parses flags and never reads settings.
Tests: tests/nebula_site/test_advertised_console.py, tests/vnode/kubelet/test_listener_limits.py,
tests/console/test_metrics_listener.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console import exporter, leaderpeer
from kube.client import Kube, load_api_client
from kube.reviews import Reviewer
from nebula_site.manager import config as manager_config
from vnode.kubelet import certcsr
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners
from vnode.kubelet.wsgilistener import WsgiListener

METRICS = "metrics"  # the metrics listener's name in vnode.kubelet.limits (body limit, log lines)


class MetricsListener(WsgiListener):
    """`/metrics` (`console.exporter`'s app, behind the token gate with `reviewer`) on
    `host:port`, plain HTTP or TLS with `cert`, bounded by `bounds` as the kubelet and console
    listeners are (I7): start(), stop(), port, scheme."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        cert: tuple[str, str] | None = None,
        reviewer: Reviewer | None = None,
        bounds: Limits | None = None,
    ) -> None:
        super().__init__(host, port, exporter.application(reviewer=reviewer), name=METRICS, cert=cert, bounds=bounds)
        self.reviewer = reviewer


def start_listeners(config: manager_config.ManagerConfig) -> Listeners:
    """The kubelet listener (TLS) and the console listener, on one Daphne server, started.
    Raises what binding raises (OSError, ValueError for certificates or an inconsistent
    kubelet auth, Twisted's errors)."""
    from nebula_site.asgi import application  # builds the Django app: only once settings are read

    listeners = Listeners(
        HandlerRegistry(),
        kubelet=ListenerConfig(*config.kubelet_addr),
        node_ip=config.runner.node_ip,
        client_ca=config.kubelet_client_ca,
        kubelet_cert=config.kubelet_cert,
        kubelet_auth=config.kubelet_auth.build(),
        console=ListenerConfig(*config.console_addr),
        console_app=application,
        console_tls=config.console_tls or config.console_cert is not None,
        console_cert=config.console_cert,
        console_ca_path=config.console_ca_path,
        console_optional=config.console_optional,
        bounds=config.listener_limits,
    )
    listeners.start()
    return listeners


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


def start_metrics_listener(
    metrics: tuple[str, int],
    *,
    cert: tuple[str, str] | None,
    token_auth: bool,
    kubeconfig: str | None,
    bounds: Limits | None = None,
) -> MetricsListener:
    """The metrics listener (`console.exporter`), started: plain HTTP, or TLS with `cert`;
    with `token_auth`, scrapers' tokens are reviewed by the API server of `kubeconfig`; its
    caps and deadlines are `bounds` (the kubelet and console listeners' `Limits`, I7).
    Serves whether or not this process leads. Raises what binding or loading the certificate
    raises (OSError, ValueError)."""
    reviewer = Reviewer(Kube(load_api_client(kubeconfig, pool_size=4))) if token_auth else None
    listener = MetricsListener(*metrics, cert=cert, reviewer=reviewer, bounds=bounds)
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


def console_url(listeners: Listeners, *, bind_host: str, tls: bool) -> str | None:
    """The console's URL as this machine's user would open it (loopback for every interface);
    None when it is not served."""
    if not listeners.console_port:
        return None
    host = bind_host if bind_host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{host}:{listeners.console_port}/"


def listener_limits(configured: dict[str, Any], *, creation: float | None, idle: float | None) -> Limits:
    """NEBULA['LISTENER_LIMITS'] over the defaults, then runvnode's timeout flags (when given).
    ValueError names a bad key or value."""
    values = dict(configured)
    if creation is not None:
        values["stream_creation_timeout"] = creation
    if idle is not None:
        values["stream_idle_timeout"] = idle
    return Limits.from_mapping(values)
