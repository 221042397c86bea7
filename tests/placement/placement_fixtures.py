"""Helpers for the placement tests: a TLS WSGI server for the console app, the webhook
registration, fake-cloud scenarios and object factories."""

from __future__ import annotations

import base64
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from devcluster import tls
from kube import names
from kube.client import Kube, path_for
from placement.blocklist import Blocklist
from placement.wiring import Placement
from providers.fake import FakeProvider
from tests.polling import wait_for as wait_for  # re-exported for the tests here
from vnode.runner import Runner


@dataclass
class Stack:
    """What the `stack` fixture runs: two fake providers, their Runners, placement, one Blocklist."""

    providers: dict[str, FakeProvider]
    blocklist: Blocklist
    runners: list[Runner]
    placement: Placement


H100_PRICES = {"gpu-a": {"Spot": 10.0, "OnDemand": 30.0}, "gpu-b": {"Spot": 20.0, "OnDemand": 40.0}}


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def get_request(self) -> tuple[Any, Any]:
        # wsgiref writes headers and body separately: without NODELAY, Nagle and the
        # client's delayed ACK add ~40 ms to every webhook call.
        connection, address = super().get_request()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address


class TlsWsgiServer:
    """Serves a WSGI app over real HTTPS on 127.0.0.1 (an ephemeral port), with its own CA."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.credentials = tls.make_credentials("127.0.0.1")
        self._server = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
        context = tls.server_context(self.credentials)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True, do_handshake_on_connect=False)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.credentials.ca_pem.decode())

    def __enter__(self) -> TlsWsgiServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def webhook_configuration(url: str, ca_pem: bytes, *, failure_policy: str = "Fail") -> dict[str, Any]:
    """The deploy/webhook manifest's shape, pointed at `url` (the devcluster calls urls only)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "nebula-placement"},
        "webhooks": [
            {
                "name": names.WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": failure_policy,
                "timeoutSeconds": 10,
                "clientConfig": {"url": url + names.WEBHOOK_PATH, "caBundle": base64.b64encode(ca_pem).decode()},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "objectSelector": {"matchLabels": {names.ENABLED_LABEL: "true"}},
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
                    ]
                },
            }
        ],
    }


def h100_scenario(provider: str) -> dict[str, Any]:
    prices = H100_PRICES[provider]
    return {
        "poll_interval": 0.2,
        "regions": {"us": ["us-east-1"]},
        "offerings": [
            {"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1", "hourly_price": 0.1},
            {
                "accelerator": "H100",
                "gpu_count": 8,
                "tiers": ["Spot", "OnDemand"],
                "regions": ["us-east-1"],
                "hourly_price": prices,
            },
        ],
    }


def nodepool(
    name: str, *, providers: list[str], capacity_types: list[str], strategy: str = "Ordered", ttl: str = "5m"
) -> dict[str, Any]:
    return {
        "apiVersion": f"{names.NODEPOOL_GROUP}/{names.NODEPOOL_VERSION}",
        "kind": names.NODEPOOL_KIND,
        "metadata": {"name": name},
        "spec": {
            "providers": [{"name": p, "regions": ["us"]} for p in providers],
            "capacityTypes": capacity_types,
            "strategy": strategy,
            "failover": {"blocklistTTL": ttl},
        },
    }


def h100_pod_template(pool: str, app: str) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {
                "app": app,
                names.ENABLED_LABEL: "true",
                names.POOL_LABEL: pool,
                names.ACCELERATOR_LABEL: "H100",
            }
        },
        "spec": {
            "containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
        },
    }


def deployment(name: str, *, replicas: int, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": h100_pod_template(pool, name),
        },
    }


def pods_of(kube: Kube, app: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("pods", namespace="default"), labelSelector=f"app={app}")
    return items


def provider_of(pod: dict[str, Any]) -> str | None:
    return ((pod.get("spec") or {}).get("nodeSelector") or {}).get(names.PROVIDER_KEY)


def tier_of(pod: dict[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(names.CAPACITY_TYPE_ANNOTATION)


def events_for(kube: Kube, reason: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"))
    return [e for e in items if e.get("reason") == reason]
