"""`manage.py runvnode`: the long-running manager process (virtual nodes for providers).

Parses and validates its flags over the NEBULA settings into one `ManagerConfig` (checking
the providers' entries, plus `--providers-file`, by building them once) and calls
`nebula_site.manager.main.main`; with `--dev-cluster` it hands over how to start the embedded
cluster (the commands alone may import it). SIGTERM or SIGINT stops intake, lets in-flight
calls finish, releases the leader Lease, exits 0 (with `--dev-cluster`, once the nodes stopped,
its Pods' instances terminated). Never wires or stops pieces itself.
Tests: tests/vnode/kubelet/test_runvnode_listeners.py, tests/nebula_site/test_runvnode_metrics.py,
tests/vnode/kubelet/test_kubelet_auth_runvnode.py, tests/nebula_site/test_devstart.py.
"""

from __future__ import annotations

import functools
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
from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from nebula_site import cli, freedmemory, gcpace, kubeletflags, openfiles, servingcert
from nebula_site.config import DEFAULTS, DEV_SECRET_KEY, operation_limits, parse_address, validate_dns_name
from nebula_site.manager import config as manager_config
from nebula_site.manager import listeners as manager_listeners
from nebula_site.manager import main as manager_main
from nebula_site.manager import startup
from nebula_site.signals import stop_on_signals
from providers import registry
from providers.owner import STANDALONE_CLUSTER
from vnode.ephemeral.budget import DEFAULT_LIMIT, check_limit
from vnode.model.runs import BackoffPolicy

DEV_KUBECONFIG = ".nebula/kubeconfig"


def _crd(file: str) -> Path:
    """Package data of an installed Nebula (the build copies deploy/crds/<file>, which the
    checkout's nebula_site/crds/<file> links to); deploy/ itself in a checkout without it."""
    packaged = Path(str(resources.files("nebula_site").joinpath("crds", file)))
    return packaged if packaged.exists() else Path(settings.BASE_DIR) / "deploy" / "crds" / file


NODEPOOL_CRD = _crd("nodepool.yaml")
BLOCKLIST_CRD = _crd("blocklistentry.yaml")
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


def ephemeral_output_budget(conf: dict[str, Any]) -> int:
    """NEBULA['EPHEMERAL_OUTPUT_BUDGET'] in bytes (checked by nebula.E021)."""
    try:
        return check_limit(conf.get("EPHEMERAL_OUTPUT_BUDGET", DEFAULT_LIMIT))
    except ValueError as exc:
        raise CommandError(f"NEBULA['EPHEMERAL_OUTPUT_BUDGET']: {exc}") from exc


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


class Command(cli.NebulaCommand, BaseCommand):
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
            default=int(manager_config.LEASE_DURATION),
            metavar="SECONDS",
            help="how long the leader Lease lasts unrenewed: a standby takes over within it "
            f"(default {manager_config.LEASE_DURATION:.0f})",
        )
        parser.add_argument(
            "--shutdown-grace",
            type=float,
            default=manager_config.SHUTDOWN_GRACE,
            metavar="SECONDS",
            help=f"after SIGTERM, how long in-flight work may finish (default {manager_config.SHUTDOWN_GRACE:.0f})",
        )
        parser.add_argument("--demo", action="store_true", help="create the demo Pod `hello` and print what to try")

    def handle(self, *args: Any, **options: Any) -> None:
        config = manager_config_from(options)
        if settings.SECRET_KEY == DEV_SECRET_KEY and config.dev_cluster is None:  # the dev key is the dev cluster's
            logging.getLogger(__name__).warning(
                "DJANGO_SECRET_KEY is unset: the console signs sessions with the public development key; "
                "set DJANGO_SECRET_KEY (and DJANGO_SETTINGS_MODULE=nebula_site.production) beyond a dev machine"
            )
        say = functools.partial(say_line, self.stdout)
        freedmemory.return_large_frees()  # before the threads start: freed buffers leave RSS (I7)
        openfiles.raise_to_hard(config.listener_limits)  # as Go programs do: the caps, not EMFILE, bound streams
        stop = threading.Event()
        # From here on SIGTERM/SIGINT ask for an orderly stop, start-up included; the collector
        # runs at the pace of a process holding every Pod of its nodes (nebula_site/gcpace.py).
        with stop_on_signals(stop), gcpace.paced_for_a_large_heap():
            try:
                kept = manager_main.main(
                    config,
                    stop,
                    build_providers=lambda cluster: registry.build_providers(
                        config.providers, config.aliases, cluster=cluster
                    ),
                    say=say,
                    start_cluster=functools.partial(start_dev_cluster, say=say),
                )
            except startup.StartError as exc:
                raise CommandError(str(exc)) from exc
        if not kept:
            raise CommandError("lost the leader lease; exiting so a standby takes over")


def manager_config_from(options: dict[str, Any]) -> manager_config.ManagerConfig:
    """The flags over the NEBULA settings, validated (CommandError names what is wrong)."""
    conf = settings.NEBULA
    entries = dict(conf["PROVIDERS"])
    if options["providers_file"]:
        entries.update(load_providers_file(options["providers_file"]))
    aliases = options["provider"] or list(conf["ENABLED_PROVIDERS"])
    entries = {a: provider_options(a, e) for a, e in entries.items()}
    dev_cluster = options["dev_cluster"]
    cluster_name = options["cluster_name"] or conf.get("CLUSTER_NAME") or None
    if cluster_name is None and dev_cluster:
        cluster_name = DEV_CLUSTER_NAME  # the embedded cluster's Namespace UIDs change with its store
    try:
        # Built once now only to report a bad entry before anything starts; the providers
        # that run are built by the manager once the cluster identity is known.
        providers = registry.build_providers(entries, aliases, cluster=cluster_name or STANDALONE_CLUSTER)
    except registry.ConfigurationError as exc:
        raise CommandError(str(exc)) from exc
    if options["poll_interval"] is not None and options["poll_interval"] <= 0:
        raise CommandError("--poll-interval must be a positive number of seconds")
    if not 0 <= options["shutdown_grace"] <= 3600:
        raise CommandError("--shutdown-grace must be between 0 and 3600 seconds")
    if not 2 <= options["lease_duration"] <= 3600:
        raise CommandError("--lease-duration must be between 2 and 3600 seconds")
    share = options["share_providers"] or bool(conf["SHARE_PROVIDERS"])
    if share and options["no_leader_election"]:
        raise CommandError("--share-providers needs leader election (drop --no-leader-election)")
    default_kubelet = DEV_KUBELET_ADDR if dev_cluster else conf["KUBELET_ADDR"]
    kubelet_addr = listen_address("--kubelet-addr", options["kubelet_addr"] or default_kubelet)
    console_addr = listen_address("--console-addr", options["console_addr"] or conf["CONSOLE_ADDR"])
    metrics_text = conf["METRICS_ADDR"] if options["metrics_addr"] is None else options["metrics_addr"]
    metrics_addr = listen_address("--metrics-addr", metrics_text) if metrics_text else None
    metrics_cert = metrics_cert_files(options)
    node_ip = node_ip_from(options["node_ip"], dev_cluster)
    node_dns_name = node_dns_name_from(options["node_dns_name"])
    cert_source, kubelet_pair = servingcert.choose(options, conf, node_ip or node_dns_name)
    console_cert = console_cert_files(options)
    try:
        limits = manager_listeners.listener_limits(
            conf["LISTENER_LIMITS"],
            creation=options["stream_creation_timeout"],
            idle=options["streaming_connection_idle_timeout"],
        )
    except ValueError as exc:
        raise CommandError(f"cannot start the kubelet and console listeners: {exc}") from exc
    kubeconfig = DEV_KUBECONFIG if dev_cluster else options["kubeconfig"]
    dev_client_ca = kubeletflags.DEV_KUBELET_CLIENT_CA if dev_cluster and not options["kubelet_client_ca"] else None
    return manager_config.ManagerConfig(
        providers=entries,
        aliases=tuple(providers),
        runner=manager_config.RunnerOptions(
            node_ip=node_ip,
            node_dns_name=node_dns_name,
            kubelet_port=kubelet_addr[1],
            poll_interval=options["poll_interval"],
            backoff=restart_backoff(),
            probe_workers=int(conf["PROBE_WORKERS"]),
            ephemeral_output_budget=ephemeral_output_budget(conf),
        ),
        kubelet_addr=kubelet_addr,
        console_addr=console_addr,
        kubelet_auth=kubeletflags.auth_options({**options, "kubeconfig": kubeconfig}),
        cluster_name=cluster_name,
        kubeconfig=kubeconfig,
        dev_cluster=parse_dev_cluster_addr(options["dev_cluster_addr"]) if dev_cluster else None,
        kubelet_client_ca=options["kubelet_client_ca"] or dev_client_ca,
        dev_client_ca=dev_client_ca,
        kubelet_cert_source=cert_source,
        kubelet_cert=kubelet_pair,
        listener_limits=limits,
        console_tls=bool(options["console_tls"] or console_cert),
        console_cert=console_cert,
        console_ca_path=CONSOLE_CA,
        console_optional=not options["console_addr"],
        metrics_addr=metrics_addr,
        metrics_cert=metrics_cert,
        metrics_token_auth=options["metrics_auth"] == "token",
        metrics_optional=options["metrics_addr"] is None and conf["METRICS_ADDR"] == DEFAULTS["METRICS_ADDR"],
        operations=operation_limits(conf, list(providers)),
        spend_interval=float(conf["SPEND_INTERVAL"]),
        namespace=options["namespace"],
        leader_election=not options["no_leader_election"],
        share_providers=share,
        lease_duration=float(options["lease_duration"]),
        shutdown_grace=options["shutdown_grace"],
        demo=options["demo"],
    )


def say_line(stdout: OutputWrapper, line: str) -> None:
    stdout.write(line)
    stdout.flush()


def parse_dev_cluster_addr(addr: str) -> manager_config.Address:
    try:
        host, port = parse_address(addr)
    except ValueError as exc:
        raise CommandError(f"--dev-cluster-addr: {exc}") from exc
    return host or "127.0.0.1", port


def start_dev_cluster(addr: manager_config.Address, *, say: startup.Say) -> Any:
    """The embedded cluster, started (the manager stops it), with the NodePool and
    BlocklistEntry CRDs loaded."""
    import devcluster

    Path(DEV_KUBECONFIG).parent.mkdir(parents=True, exist_ok=True)
    cluster = devcluster.DevCluster(*addr, kubeconfig_path=DEV_KUBECONFIG)
    try:
        cluster.start()
    except OSError as exc:
        raise startup.StartError(f"cannot start the embedded cluster on {addr[0]}:{addr[1]}: {exc}") from exc
    # The CRDs, as `kubectl apply -k deploy/crds` would install them, so placement, the
    # blocklist's cluster copy and `kubectl get nodepools,nbl` work against it too.
    for crd, what in ((NODEPOOL_CRD, "NodePools"), (BLOCKLIST_CRD, "blocklist entries")):
        if crd.exists():
            cluster.load_manifests(crd.read_text())
        else:
            logging.getLogger(__name__).warning("%s is missing: no %s in the embedded cluster", crd, what)
    say(f"embedded cluster at {cluster.url}; kubeconfig {DEV_KUBECONFIG}")
    return cluster
