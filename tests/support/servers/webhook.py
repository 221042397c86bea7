"""A mutating admission webhook over real TLS for the devcluster's admission tests: it records
each AdmissionReview and answers with `Hook.answer`; `Hook.config` is its
MutatingWebhookConfiguration by URL. Used by tests/devcluster/test_admission*.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devcluster import tls

Answer = Callable[[dict[str, Any]], dict[str, Any]]


class Hook:
    """A webhook over real TLS; `answer` turns the AdmissionReview request into a response."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.credentials = tls.make_credentials(host)  # SANs: localhost, 127.0.0.1 and `host`
        self.reviews: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.hosts: list[str] = []
        self.answer: Answer = lambda request: {"uid": request["uid"], "allowed": True}
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hook.paths.append(self.path)
                hook.hosts.append(self.headers.get("Host", ""))
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.reviews.append(review)
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": hook.answer(review["request"]),
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = tls.server_context(self.credentials).wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def config(
        self,
        *,
        failure_policy: str = "Fail",
        object_selector: Any = None,
        namespace_selector: Any = None,
        ca: bytes | None = None,
        url: str | None = None,
        service: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The configuration calling this hook at `url` (default: its own address), or at
        `service` (a clientConfig.service) when one is given."""
        webhook: dict[str, Any] = {
            "name": "test.hook.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "timeoutSeconds": 5,
            "clientConfig": {
                **({"service": service} if service else {"url": url or f"https://127.0.0.1:{self.port}/mutate"}),
                "caBundle": base64.b64encode(ca or self.credentials.ca_pem).decode(),
            },
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
        }
        if object_selector is not None:
            webhook["objectSelector"] = object_selector
        if namespace_selector is not None:
            webhook["namespaceSelector"] = namespace_selector
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "test"},
            "webhooks": [webhook],
        }


@contextlib.contextmanager
def serving(host: str = "127.0.0.1") -> Iterator[Hook]:
    """A started Hook whose certificate names `host`, shut down on exit."""
    server = Hook(host)
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join()


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def patch_answer(ops: list[dict[str, Any]]) -> Answer:
    return lambda request: {
        "uid": request["uid"],
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
    }
