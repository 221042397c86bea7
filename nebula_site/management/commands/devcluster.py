"""`manage.py devcluster`: run the embedded Kubernetes API server in the foreground.

Parses arguments and calls `run_devcluster`; all behaviour lives in the `devcluster`
package. For demos and tests only: it serves until SIGINT or SIGTERM, then exits 0.
Tests: tests/devcluster/test_command.py.
"""

from __future__ import annotations

import threading
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

import devcluster
import devcluster.errors
from nebula_site import cli, gcpace
from nebula_site.config import parse_address
from nebula_site.signals import stop_on_signals


def parse_addr(addr: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:PORT`) to a host and port; CommandError when malformed."""
    usage = "--addr must be HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:6443"
    try:
        host, port = parse_address(addr)
    except ValueError as exc:
        raise CommandError(f"{usage} ({exc})") from exc
    if not host:
        raise CommandError(f"{usage} (got {addr!r}: no host)")
    return host, port


def run_devcluster(
    host: str, port: int, *, kubeconfig: str, crds: list[str], stdout: Any, stop: threading.Event
) -> None:
    """Start the cluster, load CRD manifests, write the kubeconfig, print how to reach it, serve
    until `stop` is set. The kubeconfig comes last, so a client that waits for it finds the CRDs."""
    cluster = devcluster.DevCluster(host, port)
    try:
        cluster.start()
    except OSError as err:
        raise CommandError(f"cannot listen on {host}:{port}: {err}") from err
    try:
        for path in crds:
            try:
                cluster.load_manifests(Path(path).read_text())
            except (OSError, ValueError, devcluster.errors.ApiError) as err:
                raise CommandError(f"cannot load --crd {path}: {err}") from err
        cluster.write_kubeconfig(kubeconfig)
        stdout.write(f"devcluster serving at {cluster.url}\n")
        stdout.write(f"kubeconfig written to {kubeconfig}\n")
        stdout.write(f"try: kubectl --kubeconfig {kubeconfig} get nodes\n")
        stdout.flush()
        with gcpace.paced_for_a_large_heap():  # at the default pace, ~7% of its CPU (bench/sync.py)
            stop.wait()
    finally:
        cluster.stop()


class Command(cli.NebulaCommand, BaseCommand):
    help = "Run the embedded Kubernetes API server (demos and tests only) until SIGINT or SIGTERM."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--addr", default="127.0.0.1:6443", help="HOST:PORT to listen on (port 0: any free port)")
        parser.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig for kubectl and clients")
        parser.add_argument(
            "--crd", action="append", default=[], metavar="FILE", help="a YAML manifest to create at start (repeatable)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = parse_addr(options["addr"])
        stop = threading.Event()
        with stop_on_signals(stop):
            run_devcluster(
                host, port, kubeconfig=options["kubeconfig"], crds=options["crd"], stdout=self.stdout, stop=stop
            )
