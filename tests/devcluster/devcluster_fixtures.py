"""Shared factories for the devcluster tests: raw HTTPS calls, Pod and Node manifests, polling."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable
from typing import Any

from devcluster import DevCluster
from tests import polling


class Raw:
    """Plain HTTPS requests to the cluster, for the wire details the official client hides."""

    def __init__(self, cluster: DevCluster) -> None:
        self.cluster = cluster
        self.context = ssl.create_default_context(cadata=cluster.ca_pem.decode())
        port = int(cluster.url.rsplit(":", 1)[1])
        self.host, self.port = "127.0.0.1", port

    def connection(self, timeout: float = 30.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | dict[str, Any] | list[Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        conn = self.connection()
        try:
            data = json.dumps(body).encode() if isinstance(body, dict | list) else body
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=data, headers=hdrs)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        status, _, data = self.request(method, path, body, **kwargs)
        return status, json.loads(data) if data else None


def make_pod(name: str = "p1", **overrides: Any) -> dict[str, Any]:
    """A minimal valid Pod manifest; top-level keys and `spec` keys can be overridden."""
    spec = {"containers": [{"name": "main", "image": "nginx:1.27"}], **overrides.pop("spec", {})}
    metadata = {"name": name, **overrides.pop("metadata", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, **overrides}


def make_node(name: str = "n1", *, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A Ready Node with an InternalIP and kubelet port (what the virtual kubelet registers)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }


def wait_for(predicate: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    return polling.wait_for(predicate, timeout, 0.02, what=what)
