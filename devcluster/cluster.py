"""`DevCluster`: the embedded API server assembled, started and stopped.

Tests, `manage.py devcluster` and later `runvnode --dev-cluster` construct one; `start()`
makes the TLS material, binds, writes the kubeconfig and starts the server, scheduler and
controller threads (the kubelet-serving CSR signer among them); `stop()` ends watches and
joins every thread. The constructor does no I/O.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import yaml

from devcluster import csrsigner, metricsapi, metricsscrape, nodeaddress, rbac_defaults, reviews, tls
from devcluster.api import Api
from devcluster.controllers import AppsController
from devcluster.csrsigner import CsrSigner
from devcluster.errors import ApiError
from devcluster.jobs import JobController
from devcluster.registry import Registry
from devcluster.requestlog import RequestLog
from devcluster.resources import Resources
from devcluster.rootca import RootCAPublisher
from devcluster.schedloop import SchedulerLoop
from devcluster.server import ApiServer
from devcluster.serviceaccounts import DefaultServiceAccounts
from devcluster.store import Store
from devcluster.tokens import Tokens

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class DevCluster:
    """A single-process Kubernetes API server over HTTPS, for demos and tests only."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        kubeconfig_path: str | None = None,
        event_history: int = 10000,
        bookmark_interval: float = 1.0,
        scheduler_interval: float = 0.5,
        kubelet_preferred_address_types: Sequence[str] = nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES,
        kubelet_certificate_authority: str | None = None,
        kubelet_signing_ca: tuple[str, str] | None = None,
        metrics_interval: float = metricsscrape.DEFAULT_INTERVAL,
    ) -> None:
        self.host = host
        self.port = port
        self.kubeconfig_path = kubeconfig_path
        self.bookmark_interval = bookmark_interval
        # kube-apiserver's --kubelet-preferred-address-types: which node address logs/exec dial.
        self.kubelet_preferred_address_types = tuple(kubelet_preferred_address_types)
        # kube-apiserver's --kubelet-certificate-authority: a PEM bundle the kubelet's serving
        # certificate must chain to (and name the dialled address); None accepts any certificate.
        self.kubelet_certificate_authority = kubelet_certificate_authority
        # kube-controller-manager's --cluster-signing-{cert,key}-file for kubernetes.io/kubelet-serving;
        # None: a CA made in memory at start (`kubelet_serving_ca_pem`).
        self.kubelet_signing_ca = kubelet_signing_ca
        self.csr_signer: CsrSigner | None = None
        self.registry = Registry()
        for rt in metricsapi.TYPES:
            self.registry.serve(rt)
        self.store = Store(history=event_history)
        self.resources = Resources(self.store, self.registry)
        self.request_log = RequestLog()
        self.scheduler = SchedulerLoop(self.resources, interval=scheduler_interval)
        self.apps = AppsController(self.resources)
        self.service_accounts = DefaultServiceAccounts(self.resources)
        self.jobs = JobController(self.resources)
        # ServiceAccount tokens (TokenRequest) and the kubeconfig's admin token, for the reviews.
        self.tokens = Tokens(self._service_account_uid)
        self._credentials: tls.Credentials | None = None
        self._kubelet_client: tls.KubeletClient | None = None
        self._kubelet_tls: ssl.SSLContext | None = None
        self._root_ca: RootCAPublisher | None = None
        self._server: ApiServer | None = None
        self._thread: threading.Thread | None = None
        # The embedded metrics-server: scrapes every node's kubelet each `metrics_interval` s.
        self.metrics = metricsscrape.MetricsScraper(
            self.store, preferred_address_types=self.kubelet_preferred_address_types, interval=metrics_interval
        )

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the devcluster is not started")
        # A wildcard bind is reached through loopback; the certificate always covers 127.0.0.1.
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"https://{host}:{self._server.server_address[1]}"

    @property
    def ca_pem(self) -> bytes:
        if self._credentials is None:
            raise RuntimeError("the devcluster is not started")
        return self._credentials.ca_pem

    @property
    def kubelet_client_ca_pem(self) -> bytes:
        """The CA of the client certificate this cluster presents to kubelets: a kubelet's
        `--kubelet-client-ca` (`runvnode --dev-cluster` wires it)."""
        if self._kubelet_client is None:
            raise RuntimeError("the devcluster is not started")
        return self._kubelet_client.ca_pem

    @property
    def kubelet_tls(self) -> ssl.SSLContext:
        """The TLS context every connection of this cluster to a kubelet uses
        (`tls.kubelet_client_context`: the proxy's, the metrics scrape's)."""
        if self._kubelet_tls is None:
            raise RuntimeError("the devcluster is not started")
        return self._kubelet_tls

    @property
    def token(self) -> str:
        if self._credentials is None:
            raise RuntimeError("the devcluster is not started")
        return self._credentials.token

    @property
    def kubelet_serving_ca_pem(self) -> bytes:
        """The CA certificate the kubelet-serving signer signs with (PEM)."""
        if self.csr_signer is None:
            raise RuntimeError("the devcluster is not started")
        return self.csr_signer.ca.cert_pem

    def kubeconfig(self) -> str:
        """The kubeconfig YAML (HTTPS, embedded CA, bearer token, context `devcluster`)."""
        if self._credentials is None:
            raise RuntimeError("the devcluster is not started")
        return tls.kubeconfig_yaml(self.url, self._credentials)

    def start(self) -> None:
        """Serve on background threads; returns once the socket is listening."""
        if self._server is not None:
            raise RuntimeError("the devcluster is already started")
        self._seed()
        self._credentials = tls.make_credentials(self.host)
        self.tokens.admin_token = self._credentials.token
        context = tls.server_context(self._credentials)
        self._kubelet_client = tls.make_kubelet_client(self._credentials)
        self._kubelet_tls = tls.kubelet_client_context(
            self._kubelet_client, kubelet_ca_path=self.kubelet_certificate_authority
        )
        api = Api(
            self.resources,
            self.registry,
            server_address=f"{self.host}:{self.port}",
            preferred_address_types=self.kubelet_preferred_address_types,
            review=reviews.Reviews(self.store, self.tokens),
        )
        self._server = ApiServer(
            (self.host, self.port),
            api=api,
            store=self.store,
            request_log=self.request_log,
            tls=context,
            bookmark_interval=self.bookmark_interval,
            kubelet_tls=self._kubelet_tls,
        )
        api.server_address = f"{self.host}:{self._server.server_address[1]}"
        signing = self.kubelet_signing_ca
        ca = csrsigner.load_signing_ca(*signing) if signing else csrsigner.make_signing_ca()
        self.csr_signer = CsrSigner(self.resources, ca, interval=self.scheduler.interval)
        self._server.hub.start()
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="devcluster-http", daemon=True
        )
        self._thread.start()
        self.scheduler.start()
        self.apps.start()
        self.jobs.start()
        self.csr_signer.start()
        self._root_ca = RootCAPublisher(self.resources, self._credentials.ca_pem)
        self._root_ca.run_once()  # every namespace has kube-root-ca.crt before the first request
        self._root_ca.start()
        self.service_accounts.run_once()  # every namespace has `default` before the first request
        self.service_accounts.start()
        api.metrics = self.metrics.metrics
        self.metrics.tls_context = self._kubelet_tls
        self.metrics.start()
        if self.kubeconfig_path:
            self.write_kubeconfig(self.kubeconfig_path)

    def write_kubeconfig(self, path: str) -> None:
        """Write a kubeconfig for this started cluster at `path` (owner-readable, whole at once)."""
        if self._credentials is None:
            raise RuntimeError("the devcluster is not started: it has no credentials to write")
        tls.write_kubeconfig(path, self.url, self._credentials)

    def stop(self) -> None:
        """Stop serving: end open watches and proxied streams, join every thread."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stopping.set()
        self.scheduler.stop()
        self.apps.stop()
        self.jobs.stop()
        if self.csr_signer is not None:
            self.csr_signer.stop()
        if self._root_ca is not None:
            self._root_ca.stop()
        self.service_accounts.stop()
        self.metrics.stop()
        server.shutdown()
        server.hub.stop()
        self.store.close_watchers()
        server.drop_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join()

    def compact(self) -> None:
        """Forget the event history: watches from any older resourceVersion get 410 Gone."""
        self.store.compact()

    def apply_manifest(self, document: dict[str, Any]) -> dict[str, Any]:
        """Create one object from a manifest (e.g. a CRD from `--crd FILE`), as POST would."""
        api_version, kind = str(document.get("apiVersion", "")), str(document.get("kind", ""))
        rt = self.registry.by_kind(api_version, kind)
        if rt is None:
            raise ApiError(404, f"no resource serves {api_version} {kind}")
        namespace = str((document.get("metadata") or {}).get("namespace") or "default") if rt.namespaced else ""
        return self.resources.create(rt, namespace, document)

    def load_manifests(self, text: str) -> list[dict[str, Any]]:
        """Create every object in a multi-document YAML text."""
        return [self.apply_manifest(doc) for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]

    def _service_account_uid(self, namespace: str, name: str) -> str | None:
        account = self.store.get("/serviceaccounts", namespace, name)
        return None if account is None else str(account["metadata"].get("uid", ""))

    def _seed(self) -> None:
        namespaces = self.resources.builtin("", "v1", "namespaces")
        for name in INITIAL_NAMESPACES:
            if self.store.get(namespaces.storage_key, "", name) is None:
                self.resources.create(namespaces, "", {"metadata": {"name": name}})
        for group, resource, document in rbac_defaults.KUBELET_API_ADMIN:
            rt = self.resources.builtin(group, "v1", resource)
            if self.store.get(rt.storage_key, "", document["metadata"]["name"]) is None:
                self.resources.create(rt, "", document)

    def __enter__(self) -> DevCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
