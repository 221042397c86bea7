"""`manage.py runvnode`: the long-running manager process (virtual nodes for providers).

Parses arguments, builds providers from settings (plus `--providers-file`), starts the
embedded cluster when asked (`--dev-cluster`), and calls the process wiring
(`nebula_site.process`: the listeners, the metrics listener, then `run`). SIGTERM or SIGINT
stops intake, lets in-flight calls finish, releases the leader Lease, exits 0. Never wires
pieces itself.
Tests: tests/vnode/kubelet/test_runvnode_listeners.py, tests/nebula_site/test_runvnode_metrics.py,
tests/vnode/kubelet/test_kubelet_auth_runvnode.py.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import threading
from argparse import ArgumentParser
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from kube.client import load_api_client
from nebula_site import demo, kubeletflags, process, servingcert
from nebula_site.config import DEFAULTS, DEV_SECRET_KEY, operation_limits, parse_address, validate_dns_name
from nebula_site.signals import stop_on_signals
from providers import registry
from providers.owner import STANDALONE_CLUSTER
from vnode.runs import BackoffPolicy

DEV_KUBECONFIG = ".nebula/kubeconfig"
# Package data of an installed Nebula (the build copies deploy/crds/nodepool.yaml, which the
# checkout's nebula_site/crds/nodepool.yaml links to); deploy/ itself in a checkout without it.
_PACKAGED_CRD = Path(str(resources.files("nebula_site").joinpath("crds", "nodepool.yaml")))
NODEPOOL_CRD = (
    _PACKAGED_CRD if _PACKAGED_CRD.exists() else Path(settings.BASE_DIR) / "deploy" / "crds" / "nodepool.yaml"
)
CONSOLE_CA = ".nebula/console-ca.pem"
DEV_CLUSTER_NAME = "dev-cluster"  # --dev-cluster's owner name: a fresh embedded store keeps its instances
DEV_KUBELET_ADDR = "127.0.0.1:0"  # --dev-cluster without --kubelet-addr: loopback, any free port


def load_providers_file(path: str) -> dict[str, Any]:
    """A YAML mapping alias -> {BACKEND, OPTIONS} (lower-case keys accepted)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CommandError(f"--providers-file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise CommandError(f"--providers-file {path}: expected a mapping of alias to backend and options")
    result: dict[str, Any] = {}
    for alias, entry in data.items():
        if not isinstance(entry, dict):
            raise CommandError(f"--providers-file {path}: {alias!r} must map to a mapping")
        result[str(alias)] = {str(k).upper(): v for k, v in entry.items()}
    return result


def provider_options(alias: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Settings that belong to the process, handed to the built-in local provider."""
    entry = dict(entry)
    if entry.get("BACKEND") == "providers.local.LocalProvider":
        options = dict(entry.get("OPTIONS") or {})
        options.setdefault("state_dir", settings.NEBULA["STATE_DIR"])
        entry["OPTIONS"] = options
    return entry


def node_ip_from(flag: str | None, dev_cluster: bool) -> str | None:
    value = flag or os.environ.get("POD_IP") or settings.NEBULA.get("NODE_IP") or ("127.0.0.1" if dev_cluster else "")
    if not value:
        return None
    try:
        ipaddress.ip_address(value)
    except ValueError as exc:
        raise CommandError(f"node IP {value!r} is not an IP address") from exc
    return value


def node_dns_name_from(flag: str | None) -> str | None:
    value = flag or settings.NEBULA.get("NODE_DNS_NAME") or ""
    if not value:
        return None
    try:
        validate_dns_name(value)
    except ValueError as exc:
        raise CommandError(f"node DNS name: {exc}") from exc
    return str(value)


def listen_address(flag: str, text: str) -> tuple[str, int]:
    """host:port to bind; the host must be an IP address (or empty: every interface)."""
    try:
        host, port = parse_address(text)
    except ValueError as exc:
        raise CommandError(f"{flag}: {exc}") from exc
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError as exc:
            raise CommandError(f"{flag}: {host!r} is not an IP address") from exc
    return host, port


def restart_backoff() -> BackoffPolicy:
    """The crash back-off from NEBULA['RESTART_BACKOFF_*'] (checked by nebula.E010)."""
    conf = settings.NEBULA
    return BackoffPolicy(
        initial=float(conf["RESTART_BACKOFF_INITIAL"]),
        maximum=float(conf["RESTART_BACKOFF_MAX"]),
        reset=float(conf["RESTART_BACKOFF_RESET"]),
    )


def console_cert_files(options: dict[str, Any]) -> tuple[str, str] | None:
    """`--console-cert` and `--console-key` go together (e.g. a cert-manager Secret's files)."""
    cert, key = options.get("console_cert"), options.get("console_key")
    if bool(cert) != bool(key):
        raise CommandError("--console-cert and --console-key go together")
    return (cert, key) if cert and key else None


def metrics_cert_files(options: dict[str, Any]) -> tuple[str, str] | None:
    """`--metrics-cert` and `--metrics-key` go together, as the console's do."""
    cert, key = options.get("metrics_cert"), options.get("metrics_key")
    if bool(cert) != bool(key):
        raise CommandError("--metrics-cert and --metrics-key go together")
    return (cert, key) if cert and key else None


def check_kubeconfig(path: str | None) -> None:
    """Fail in one line when there is no cluster to talk to (no --kubeconfig, no in-cluster
    environment, no $KUBECONFIG, no ~/.kube/config), before any controller starts."""
    from kubernetes.config import ConfigException

    try:
        load_api_client(path).close()
    except (ConfigException, OSError, ValueError) as exc:
        where = f"--kubeconfig {path}" if path else "none of --kubeconfig, in-cluster, $KUBECONFIG, ~/.kube/config"
        raise CommandError(f"cannot load a kubeconfig ({where}): {str(exc).rstrip('.')}; or use --dev-cluster") from exc


def migrate_mirror() -> None:
    """Bring the console's mirror tables (this replica's SQLite by default) up to date
    before the first request can need them. Django records a migration with deferred SQL
    only after its transaction commits, so a kill in between leaves tables that no record
    explains; `fake_initial` takes such an initial migration as applied instead of failing
    every later start with "table already exists"."""
    Path(str(settings.DATABASES["default"]["NAME"])).parent.mkdir(parents=True, exist_ok=True)
    call_command("migrate", interactive=False, verbosity=0, fake_initial=True)


class Command(BaseCommand):
    help = "Run Nebula's virtual nodes: one per --provider, against a cluster or the embedded one."
    console_url: str | None = None  # where the console listens, once it does

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--provider", action="append", default=[], metavar="ALIAS", help="repeatable")
        parser.add_argument("--providers-file", metavar="PATH", help="YAML: alias -> {backend, options}")
        parser.add_argument("--kubeconfig", metavar="PATH", help="default: in-cluster, then $KUBECONFIG")
        parser.add_argument("--dev-cluster", action="store_true", help="start the embedded API server in-process")
        parser.add_argument("--dev-cluster-addr", default="127.0.0.1:6443", help="its HOST:PORT (0: any free port)")
        parser.add_argument(
            "--kubelet-addr", default=None, help="the kubelet API listener, default NEBULA['KUBELET_ADDR']"
        )
        kubeletflags.add_arguments(parser)  # --kubelet-client-ca, serving certificate, auth, stream timeouts
        parser.add_argument("--console-addr", default=None, help="the console listener, default NEBULA['CONSOLE_ADDR']")
        parser.add_argument(
            "--console-tls", action="store_true", help=f"serve the console over TLS; its CA goes to {CONSOLE_CA}"
        )
        parser.add_argument("--console-cert", metavar="PATH", help="PEM certificate for the console (implies TLS)")
        parser.add_argument("--console-key", metavar="PATH", help="PEM private key of --console-cert")
        parser.add_argument(
            "--metrics-addr", default=None, help="the /metrics listener (empty: none), default NEBULA['METRICS_ADDR']"
        )
        parser.add_argument("--metrics-cert", metavar="PATH", help="PEM certificate: serve /metrics over TLS")
        parser.add_argument("--metrics-key", metavar="PATH", help="PEM private key of --metrics-cert")
        parser.add_argument(
            "--metrics-auth",
            choices=("none", "token"),
            default="none",
            help="token: scrapers send a bearer token RBAC allows `get` on /metrics (TokenReview, SubjectAccessReview)",
        )
        parser.add_argument("--node-ip", default=None, help="address the nodes publish; default $POD_IP")
        parser.add_argument(
            "--node-dns-name",
            default=None,
            help="a DNS name of the kubelet listener the nodes publish (InternalDNS); default NEBULA['NODE_DNS_NAME']",
        )
        parser.add_argument(
            "--cluster-name",
            default=None,
            help="who owns this manager's instances (a DNS label); default NEBULA['CLUSTER_NAME'], "
            "else the kube-system Namespace's UID",
        )
        parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "default"), help="leader Lease")
        parser.add_argument("--poll-interval", type=float, default=None, help="seconds; default: the provider's")
        parser.add_argument("--no-leader-election", action="store_true", help="run controllers without a Lease")
        parser.add_argument(
            "--share-providers",
            action="store_true",
            help="share the providers out across the replicas, one node Lease each (default NEBULA['SHARE_PROVIDERS'])",
        )
        parser.add_argument(
            "--lease-duration",
            type=int,
            default=int(process.LEASE_DURATION),
            metavar="SECONDS",
            help="how long the leader Lease lasts unrenewed: a standby takes over within it "
            f"(default {process.LEASE_DURATION:.0f})",
        )
        parser.add_argument(
            "--shutdown-grace",
            type=float,
            default=process.SHUTDOWN_GRACE,
            metavar="SECONDS",
            help=f"after SIGTERM, how long in-flight work may finish (default {process.SHUTDOWN_GRACE:.0f})",
        )
        parser.add_argument("--demo", action="store_true", help="create the demo Pod `hello` and print what to try")

    def handle(self, *args: Any, **options: Any) -> None:
        config = dict(settings.NEBULA["PROVIDERS"])
        if options["providers_file"]:
            config.update(load_providers_file(options["providers_file"]))
        aliases = options["provider"] or list(settings.NEBULA["ENABLED_PROVIDERS"])
        entries = {a: provider_options(a, e) for a, e in config.items()}
        cluster_name = options["cluster_name"] or settings.NEBULA.get("CLUSTER_NAME") or None
        if cluster_name is None and options["dev_cluster"]:
            cluster_name = DEV_CLUSTER_NAME  # the embedded cluster's Namespace UIDs change with its store
        try:
            # Built once now only to report a bad entry before anything starts; the providers
            # that run are built by `process.run` once the cluster identity is known.
            providers = registry.build_providers(entries, aliases, cluster=cluster_name or STANDALONE_CLUSTER)
        except registry.ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        if options["poll_interval"] is not None and options["poll_interval"] <= 0:
            raise CommandError("--poll-interval must be a positive number of seconds")
        if not 0 <= options["shutdown_grace"] <= 3600:
            raise CommandError("--shutdown-grace must be between 0 and 3600 seconds")
        if not 2 <= options["lease_duration"] <= 3600:
            raise CommandError("--lease-duration must be between 2 and 3600 seconds")
        share = options["share_providers"] or bool(settings.NEBULA["SHARE_PROVIDERS"])
        if share and options["no_leader_election"]:
            raise CommandError("--share-providers needs leader election (drop --no-leader-election)")
        default_kubelet = DEV_KUBELET_ADDR if options["dev_cluster"] else settings.NEBULA["KUBELET_ADDR"]
        kubelet_addr = listen_address("--kubelet-addr", options["kubelet_addr"] or default_kubelet)
        console_addr = listen_address("--console-addr", options["console_addr"] or settings.NEBULA["CONSOLE_ADDR"])
        metrics_text = settings.NEBULA["METRICS_ADDR"] if options["metrics_addr"] is None else options["metrics_addr"]
        metrics_addr = listen_address("--metrics-addr", metrics_text) if metrics_text else None
        metrics_cert = metrics_cert_files(options)
        node_ip = node_ip_from(options["node_ip"], options["dev_cluster"])
        node_dns_name = node_dns_name_from(options["node_dns_name"])
        cert_source, options["kubelet_pair"] = servingcert.choose(options, settings.NEBULA, node_ip or node_dns_name)
        if settings.SECRET_KEY == DEV_SECRET_KEY:
            logging.getLogger(__name__).warning(
                "DJANGO_SECRET_KEY is unset: the console signs sessions with the public development key; "
                "set DJANGO_SECRET_KEY (and DJANGO_SETTINGS_MODULE=nebula_site.production) beyond a dev machine"
            )
        # From here on SIGTERM/SIGINT ask for an orderly stop, start-up included.
        stop = threading.Event()
        listeners = cluster = exporter = serving = None
        kept = True
        with stop_on_signals(stop):
            try:
                if not options["dev_cluster"]:
                    check_kubeconfig(options["kubeconfig"])  # one line, before anything listens or logs
                kubeconfig = options["kubeconfig"]
                if options["dev_cluster"]:
                    # First: the kubelet listener reviews tokens with it and trusts its client CA.
                    cluster = self._start_dev_cluster(options["dev_cluster_addr"])
                    kubeconfig = DEV_KUBECONFIG
                    if not options["kubelet_client_ca"]:
                        options["kubelet_client_ca"] = kubeletflags.write_dev_client_ca(cluster.kubelet_client_ca_pem)
                listeners = self._start_listeners(
                    kubelet_addr, console_addr, node_ip, {**options, "kubeconfig": kubeconfig}
                )
                migrate_mirror()
                if cert_source == "csr":
                    serving = process.start_serving_csr(listeners, kubeconfig, list(providers), node_ip, node_dns_name)
                if metrics_addr is not None:
                    exporter = self._start_metrics(metrics_addr, metrics_cert, kubeconfig, options)
                if node_ip is None and node_dns_name is None:
                    logging.getLogger(__name__).warning("no node address: logs and exec are advertised as unsupported")
                self.stdout.write(f"virtual nodes: {', '.join('nebula-' + a for a in providers)}")
                if options["demo"] and not stop.is_set():
                    demo.create_demo_pod(kubeconfig, provider=next(iter(providers)))
                    self.stdout.write(demo.instructions(kubeconfig or "$KUBECONFIG"))
                self.stdout.flush()
                if stop.is_set():
                    logging.getLogger(__name__).info("stopped while starting: no virtual node was started")
                    return
                kept = process.run(
                    lambda cluster: registry.build_providers(entries, list(providers), cluster=cluster),
                    aliases=list(providers),
                    cluster_name=cluster_name,
                    registry=listeners.registry,
                    kubeconfig=kubeconfig,
                    node_ip=node_ip,
                    node_dns_name=node_dns_name,
                    kubelet_port=listeners.kubelet_port,
                    namespace=options["namespace"],
                    stop=stop,
                    poll_interval=options["poll_interval"],
                    leader_election=not options["no_leader_election"],
                    shutdown_grace=options["shutdown_grace"],
                    backoff=restart_backoff(),
                    probe_workers=int(settings.NEBULA["PROBE_WORKERS"]),
                    operations=operation_limits(settings.NEBULA, list(providers)),
                    console=process.advertised_console(listeners, bind_host=console_addr[0], node_ip=node_ip),
                    lease_duration=float(options["lease_duration"]),
                    on_leading=self._print_dev_login if options["demo"] and options["dev_cluster"] else None,
                    share_providers=share,
                )
            finally:
                if serving is not None:
                    serving.stop()
                if exporter is not None:
                    exporter.stop()
                if listeners is not None:
                    listeners.stop()
                if cluster is not None:
                    cluster.stop()
        if not kept:
            raise CommandError("lost the leader lease; exiting so a standby takes over")

    def _start_listeners(
        self, kubelet: tuple[str, int], console: tuple[str, int], node_ip: str | None, options: dict[str, Any]
    ) -> Any:
        """The kubelet and console listeners (`process.start_listeners`), failures as CommandError."""
        tls = bool(options["console_tls"] or options["console_cert"])
        try:
            listeners = process.start_listeners(
                kubelet,
                console,
                node_ip=node_ip,
                client_ca=options["kubelet_client_ca"],
                kubelet_cert=options.get("kubelet_pair"),
                kubelet_auth=kubeletflags.auth_options(options),
                console_tls=tls,
                console_cert=console_cert_files(options),
                console_ca_path=CONSOLE_CA,
                console_optional=not options["console_addr"],
                bounds=process.listener_limits(
                    settings.NEBULA["LISTENER_LIMITS"],
                    creation=options["stream_creation_timeout"],
                    idle=options["streaming_connection_idle_timeout"],
                ),
            )
        except Exception as exc:  # OSError, ValueError (certificates), Twisted's CannotListenError
            raise CommandError(f"cannot start the kubelet and console listeners: {exc}") from exc
        scheme = "https" if tls else "http"
        where = f"{scheme}://{console[0] or '*'}:{listeners.console_port}" if listeners.console_port else "not served"
        host = console[0] if console[0] not in ("", "0.0.0.0", "::") else "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        self.console_url = f"{scheme}://{host}:{listeners.console_port}/" if listeners.console_port else None
        self.stdout.write(f"kubelet API on port {listeners.kubelet_port}; console {where}")
        return listeners

    def _start_metrics(
        self, addr: tuple[str, int], cert: tuple[str, str] | None, kubeconfig: str | None, options: dict[str, Any]
    ) -> Any:
        """The metrics listener (`process.start_metrics_listener`). Given explicitly (the flag
        or NEBULA_METRICS_ADDR), a failure to bind stops runvnode; the built-in default address
        in use only logs a warning (None), as several dev managers may run on one machine."""
        try:
            exporter = process.start_metrics_listener(
                addr, cert=cert, token_auth=options["metrics_auth"] == "token", kubeconfig=kubeconfig
            )
        except Exception as exc:  # OSError (in use), ssl.SSLError (certificate), a bad kubeconfig
            defaulted = options["metrics_addr"] is None and settings.NEBULA["METRICS_ADDR"] == DEFAULTS["METRICS_ADDR"]
            if defaulted and getattr(exc, "errno", None) == errno.EADDRINUSE:
                logging.getLogger(__name__).warning("no metrics listener: %s:%d: %s", *addr, exc)
                return None
            raise CommandError(f"cannot start the metrics listener: {exc}") from exc
        auth = " (token auth)" if options["metrics_auth"] == "token" else ""
        self.stdout.write(f"metrics {exporter.scheme}://{addr[0] or '*'}:{exporter.port}/metrics{auth}")
        return exporter

    def _print_dev_login(self) -> None:
        """`--demo` on the embedded cluster: a fresh dev login, printed once this process leads,
        so the console it names answers at once. Never made on a real cluster."""
        self.stdout.write(demo.login_line(self.console_url, *demo.reset_dev_login()))
        self.stdout.flush()

    def _start_dev_cluster(self, addr: str) -> Any:
        import devcluster

        try:
            host, port = parse_address(addr)
        except ValueError as exc:
            raise CommandError(f"--dev-cluster-addr: {exc}") from exc
        Path(DEV_KUBECONFIG).parent.mkdir(parents=True, exist_ok=True)
        cluster = devcluster.DevCluster(host or "127.0.0.1", port, kubeconfig_path=DEV_KUBECONFIG)
        try:
            cluster.start()
        except OSError as exc:
            raise CommandError(f"cannot start the embedded cluster on {addr}: {exc}") from exc
        # The NodePool CRD, as `kubectl apply -f deploy/crds` would install it, so placement
        # and `kubectl get nodepools` work against the embedded cluster too.
        if NODEPOOL_CRD.exists():
            cluster.load_manifests(NODEPOOL_CRD.read_text())
        else:
            logging.getLogger(__name__).warning("%s is missing: no NodePools in the embedded cluster", NODEPOOL_CRD)
        self.stdout.write(f"embedded cluster at {cluster.url}; kubeconfig {DEV_KUBECONFIG}")
        return cluster
