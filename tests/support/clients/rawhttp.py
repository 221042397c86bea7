"""Plain HTTPS requests to the embedded cluster, for the wire details the official client hides.

Used by the devcluster tests (the `raw` fixture) and anything checking bytes on the wire;
it never retries and never parses more than JSON.
"""

from __future__ import annotations

import http.client
import json
import ssl
from typing import Any

from devcluster import DevCluster


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
