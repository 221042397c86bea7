"""What the base install registers, registered on the embedded cluster of `runvnode --dev-cluster`
(`install`): the console ClusterRoles (deploy/base/console-roles.yaml) and the placement
MutatingWebhookConfiguration (deploy/webhook/), its `clientConfig` pointed at a loopback TLS
listener of this process (`WebhookListener`) that serves the console's /webhooks/pods with a CA
made at start, so docs' recipes (an opted-in Pod, a token login) work on `make run` as written.

Called by `nebula_site.manager.main` for `--dev-cluster` only, through the API as `kubectl apply`
would. Never runs against a real cluster (its install is deploy/), and the listener serves
nothing but the webhook path, to at most MAX_CONNECTIONS connections at once, each waiting at
most HANDSHAKE_TIMEOUT for the client's next bytes.
Tests: tests/nebula_site/test_devstart.py::test_the_dev_webhook_listener_serves_a_bounded_number_of_connections,
tests/nebula_site/test_devstart.py::test_make_run_places_the_documented_opted_in_pod,
tests/nebula_site/test_devstart.py::test_make_run_lets_a_console_role_token_log_in.
"""

from __future__ import annotations

import base64
import copy
import socket
import socketserver
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import yaml
from django.conf import settings

from kube import names
from kube.client import ConflictError, Kube, load_api_client, path_for
from vnode.kubelet import certs

WEBHOOK_HOST = "127.0.0.1"
HANDSHAKE_TIMEOUT = 10.0  # seconds a connection may wait for the client's next bytes
MAX_CONNECTIONS = 32  # connections served at once (a thread each); one more is closed unserved
_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"


def manifest(packaged: str, checkout: str) -> Path:
    """A manifest of deploy/: the installed package's copy (nebula_site/manifests/, links to
    deploy/ in a checkout), else deploy/ of the checkout."""
    path = Path(str(resources.files("nebula_site").joinpath("manifests", packaged)))
    return path if path.exists() else Path(settings.BASE_DIR) / "deploy" / checkout


def console_roles() -> list[dict[str, Any]]:
    text = manifest("console-roles.yaml", "base/console-roles.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]


def webhook_configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    """deploy/webhook's configuration, its Service reference replaced by `url` and `ca_pem`."""
    text = manifest("placement-webhook.yaml", "webhook/mutatingwebhookconfiguration.yaml").read_text()
    config: dict[str, Any] = copy.deepcopy(yaml.safe_load(text))
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": url + names.WEBHOOK_PATH, "caBundle": base64.b64encode(ca_pem).decode()}
    return config


class _Handler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # the console's own logging says what the view did


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    context: ssl.SSLContext
    slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        # At most MAX_CONNECTIONS threads: a connection past the cap is closed before any read.
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake in the request's own thread, so a slow client never holds the accept loop.
        request.settimeout(HANDSHAKE_TIMEOUT)
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            wrapped = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()


class WebhookListener:
    """The console's /webhooks/pods over TLS on loopback (any free port), with its own CA;
    every other path is 404. `start` binds and serves from a thread; `stop` closes."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self._app = app
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.ca_pem = b""
        self.url = ""

    def start(self) -> None:
        ca = certs.make_ca("nebula-dev-webhook-ca")
        pair = certs.issue(ca, "nebula-dev-webhook", hosts=(WEBHOOK_HOST,))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as folder:
            cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
            cert.write_bytes(pair.cert_pem)
            key.write_bytes(pair.key_pem)
            context.load_cert_chain(cert, key)
        server = _Server((WEBHOOK_HOST, 0), _Handler)
        server.context = context
        server.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        server.set_app(self._only_the_webhook)
        self._server, self.ca_pem = server, ca.cert_pem
        self.url = f"https://{WEBHOOK_HOST}:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, args=(0.2,), name="dev-webhook", daemon=True)
        self._thread.start()

    def _only_the_webhook(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != names.WEBHOOK_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        result: Iterable[bytes] = self._app(environ, start_response)
        return result

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def apply(kube: Kube, path: str, obj: dict[str, Any]) -> None:
    """Create `obj` at `path`, or replace the one of its name (a store kept from a last run)."""
    try:
        kube.create(path, obj)
    except ConflictError:
        named = f"{path}/{obj['metadata']['name']}"
        version = kube.get(named)["metadata"]["resourceVersion"]
        kube.replace(named, {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}})


def install(kubeconfig: str | None, say: Callable[[str], None]) -> WebhookListener:
    """The console roles and the placement webhook (on a started `WebhookListener`, returned
    for the caller to stop), applied to the embedded cluster of `kubeconfig`."""
    from django.core.wsgi import get_wsgi_application

    listener = WebhookListener(get_wsgi_application())
    listener.start()
    kube = Kube(load_api_client(kubeconfig))
    try:
        for role in console_roles():
            apply(kube, path_for("clusterroles", group=_RBAC), role)
        config = webhook_configuration(listener.url, listener.ca_pem)
        apply(kube, path_for("mutatingwebhookconfigurations", group=_ADMISSION), config)
    except BaseException:
        listener.stop()
        raise
    finally:
        kube.close()
    roles = ", ".join(str(r["metadata"]["name"]) for r in console_roles())
    say(f"installed on the embedded cluster: the placement webhook ({listener.url}), the roles {roles}")
    return listener
