"""The manager's start-up, before it seeks the leader Lease: the kubeconfig check, the embedded
cluster (started by the caller's factory), the listeners, the console's tables, on the embedded
cluster the base install's webhook and roles, the kubelet
certificate from the CSR API, the metrics listener, and once leading the `--demo` Pod (after its
node is Ready) with the dev login, each said in one line.

Called by `nebula_site.manager.main.main`, which pushes each started piece's stop onto its
ordered stop. Raises `StartError` for what a person must fix; never parses flags.
Tests: tests/vnode/kubelet/test_runvnode_listeners.py, tests/nebula_site/test_runvnode_metrics.py,
tests/nebula_site/test_migrate.py.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from django.conf import settings
from django.core.management import call_command

from kube.client import KubeError, load_api_client
from nebula_site import demo
from nebula_site.manager import config as manager_config
from nebula_site.manager import devinstall
from nebula_site.manager import listeners as manager_listeners
from nebula_site.manager.listeners import MetricsListener
from vnode.kubelet.server import Listeners

logger = logging.getLogger(__name__)

Say = Callable[[str], None]  # one line for the person who started the manager


class StartError(Exception):
    """Start-up cannot go on; the message says what to fix (`runvnode` shows it)."""


class EmbeddedCluster(Protocol):
    """The embedded API server (`--dev-cluster`) as the manager sees it: built and started by
    `runvnode` (the commands alone may import the test bed), stopped here."""

    @property
    def kubelet_client_ca_pem(self) -> bytes: ...

    def stop(self) -> None: ...


def check_kubeconfig(path: str | None) -> None:
    """Fail in one line when there is no cluster to talk to (no --kubeconfig, no in-cluster
    environment, no $KUBECONFIG, no ~/.kube/config), before any controller starts."""
    from kubernetes.config import ConfigException

    try:
        load_api_client(path).close()
    except (ConfigException, OSError, ValueError) as exc:
        where = f"--kubeconfig {path}" if path else "none of --kubeconfig, in-cluster, $KUBECONFIG, ~/.kube/config"
        raise StartError(f"cannot load a kubeconfig ({where}): {str(exc).rstrip('.')}; or use --dev-cluster") from exc


def migrate_mirror() -> None:
    """Bring the console's mirror tables (this replica's SQLite by default) up to date
    before the first request can need them. Django records a migration with deferred SQL
    only after its transaction commits, so a kill in between leaves tables that no record
    explains; `fake_initial` takes such an initial migration as applied instead of failing
    every later start with "table already exists"."""
    Path(str(settings.DATABASES["default"]["NAME"])).parent.mkdir(parents=True, exist_ok=True)
    call_command("migrate", interactive=False, verbosity=0, fake_initial=True)


def write_client_ca(path: str, pem: bytes) -> str:
    """The embedded cluster's kubelet client CA (public), written where the kubelet listener
    loads it as its client CA; returns the path."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(pem)
    return str(file)


def start_listeners(config: manager_config.ManagerConfig, say: Say) -> Listeners:
    """The kubelet and console listeners, failures as StartError."""
    try:
        listeners = manager_listeners.start_listeners(config)
    except Exception as exc:  # OSError, ValueError (certificates), Twisted's CannotListenError
        raise StartError(f"cannot start the kubelet and console listeners: {exc}") from exc
    tls = config.console_tls or config.console_cert is not None
    host, port = config.console_addr[0], listeners.console_port
    where = f"{'https' if tls else 'http'}://{host or '*'}:{port}" if port else "not served"
    say(f"kubelet API on port {listeners.kubelet_port}; console {where}")
    return listeners


def install_on_dev_cluster(config: manager_config.ManagerConfig, say: Say) -> devinstall.WebhookListener:
    """The base install's console roles and placement webhook on the embedded cluster; returns
    the webhook's listener to stop."""
    try:
        return devinstall.install(config.kubeconfig, say)
    except (KubeError, OSError) as exc:
        raise StartError(f"cannot install the placement webhook and console roles on the dev cluster: {exc}") from exc


def start_metrics(config: manager_config.ManagerConfig, say: Say) -> MetricsListener | None:
    """The metrics listener, when configured. Given explicitly (the flag or NEBULA_METRICS_ADDR),
    a failure to bind is a StartError; the built-in default address in use only logs a warning
    (None), as several dev managers may run on one machine."""
    if config.metrics_addr is None:
        return None
    try:
        exporter = manager_listeners.start_metrics_listener(
            config.metrics_addr,
            cert=config.metrics_cert,
            token_auth=config.metrics_token_auth,
            kubeconfig=config.kubeconfig,
            bounds=config.listener_limits,
        )
    except Exception as exc:  # OSError (in use), ValueError (certificate), a bad kubeconfig
        if config.metrics_optional and getattr(exc, "errno", None) == errno.EADDRINUSE:
            logger.warning("no metrics listener: %s:%d: %s", *config.metrics_addr, exc)
            return None
        raise StartError(f"cannot start the metrics listener: {exc}") from exc
    auth = " (token auth)" if config.metrics_token_auth else ""
    say(f"metrics {exporter.scheme}://{config.metrics_addr[0] or '*'}:{exporter.port}/metrics{auth}")
    return exporter


def announce(config: manager_config.ManagerConfig, say: Say) -> None:
    """The virtual nodes this process runs."""
    if config.runner.node_ip is None and config.runner.node_dns_name is None:
        logger.warning("no node address: logs and exec are advertised as unsupported")
    say(f"virtual nodes: {', '.join('nebula-' + a for a in config.aliases)}")


def demo_on_leading(
    config: manager_config.ManagerConfig, console_url: str | None, say: Say, stop: threading.Event
) -> Callable[[], None] | None:
    """`--demo`, once this process leads: on the embedded cluster a fresh dev login (never made
    on a real cluster), so the console it names answers at once; then, once the first node is
    Ready (no FailedScheduling first), the demo Pod and what to try, from a thread of its own."""
    if not config.demo:
        return None

    def on_leading() -> None:
        if config.dev_cluster is not None:
            say(demo.login_line(console_url, *demo.reset_dev_login()))
        threading.Thread(
            target=demo.create_when_ready,
            args=(config.kubeconfig,),
            kwargs={"provider": config.aliases[0], "stop": stop, "say": say},
            name="demo-pod",
            daemon=True,
        ).start()

    return on_leading
