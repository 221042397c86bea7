"""`CsrCertificates`: the kubelet serving certificate from the certificates.k8s.io/v1 CSR API,
renewed before expiry, as the kubelet's certificate manager does it.

Started by the process wiring (`nebula_site.manager.listeners.start_serving_csr`) once the listener is
up. Steps: make an EC P-256 key in memory (never written, never logged); create a CSR for
signer `kubernetes.io/kubelet-serving` (CN `system:node:<node>`, O `system:nodes`, SANs the
node IPs and DNS names, usages digital signature and server auth: key encipherment is for
RSA keys only); log once that it waits for approval and what to run; watch it until the
signer writes `status.certificate` (a Denied or Failed CSR is logged and retried after
`retry`); swap the listener's `ServerTLS` pair; sleep until a jittered 70-90% of the
certificate's lifetime (`renewal_deadline`), then again with a new key. Until the first
certificate is issued, and while a renewal waits, the listener serves what it served before.
Tests: tests/vnode/kubelet/test_kubelet_certs_csr.py.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kube.client import Kube, KubeError, path_for
from vnode.kubelet import certs

logger = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kubelet-serving"
GROUP = "certificates.k8s.io"
CSRS = path_for("certificatesigningrequests", group=GROUP)
USAGES = ("digital signature", "server auth")  # an EC key: no key encipherment
NAME_PREFIX = "csr-"  # generateName, as the kubelet's


class CsrRefused(Exception):
    """The CSR was denied or the signer failed it; the message says why."""


@dataclass(frozen=True)
class CsrRequest:
    """What the certificate is for. `node_name` is the CN; `ips` and `dns_names` the SANs."""

    node_name: str
    ips: tuple[str, ...]
    dns_names: tuple[str, ...] = ()
    expiration_seconds: int | None = None  # None: the signer's default duration


def renewal_deadline(not_before: float, not_after: float, *, jitter: float) -> float:
    """When to renew (epoch seconds): 70% of the lifetime plus up to 20% more by `jitter` in
    [0, 1), as the kubelet's certificate manager picks it."""
    return not_before + (not_after - not_before) * (0.7 + 0.2 * jitter)


def request_pem(key: ec.EllipticCurvePrivateKey, request: CsrRequest) -> bytes:
    """The PKCS#10 request (PEM) for `request`, signed with `key`."""
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{request.node_name}"),
        ]
    )
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dict.fromkeys(request.dns_names)]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys(request.ips)]
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_object(pem: bytes, request: CsrRequest) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "request": base64.b64encode(pem).decode(),
        "signerName": SIGNER,
        "usages": list(USAGES),
    }
    if request.expiration_seconds is not None:
        spec["expirationSeconds"] = request.expiration_seconds
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": NAME_PREFIX},
        "spec": spec,
    }


def _issued(csr: dict[str, Any]) -> bytes | None:
    """The certificate PEM once issued; CsrRefused when denied or failed."""
    status = csr.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Denied", "Failed") and condition.get("status") == "True":
            reason = condition.get("reason") or condition["type"]
            raise CsrRefused(f"{condition['type']} ({reason}): {condition.get('message') or 'no message'}")
    certificate = status.get("certificate")
    return base64.b64decode(certificate) if certificate else None


class CsrCertificates:
    """Keeps `tls` serving a certificate issued through the CSR API. `start()`, `stop()`."""

    def __init__(
        self,
        kube: Kube,
        tls: certs.ServerTLS,
        request: CsrRequest,
        *,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
        check_interval: float = 10.0,
        watch_timeout: int = 30,
        retry: float = 30.0,
    ) -> None:
        self.kube = kube
        self.tls = tls
        self.request = request
        self.clock = clock
        self.jitter = jitter
        self.check_interval = check_interval  # how often the renewal wait looks at the clock
        self.watch_timeout = watch_timeout  # seconds per watch call while waiting for the signer
        self.retry = retry  # seconds after a failure (API error, denied, failed) before a new CSR
        self.issued = 0  # certificates served so far (for tests and the log)
        self.pending: str | None = None  # the name of the CSR waiting for approval or signing
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kubelet-cert-csr", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the loop; a watch in flight ends within `watch_timeout`, which is not awaited."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pair = self.obtain()
            except (KubeError, CsrRefused, ValueError) as exc:
                if self._stop.is_set():
                    return
                logger.warning("kubelet serving certificate: %s; a new CSR in %gs", exc, self.retry)
                self._stop.wait(self.retry)
                continue
            if pair is None:
                return  # stopped
            self.tls.replace(pair)
            self.issued += 1
            cert = x509.load_pem_x509_certificate(pair.cert_pem)
            start, end = cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()
            deadline = renewal_deadline(start, end, jitter=self.jitter())
            logger.info(
                "kubelet serving certificate %s issued for node %s, valid until %s; renewal at %s",
                certs.fingerprint(pair.cert_pem)[:16],
                self.request.node_name,
                cert.not_valid_after_utc.isoformat(),
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline)),
            )
            while not self._stop.is_set() and self.clock() < deadline:
                self._stop.wait(self.check_interval)

    def obtain(self) -> certs.KeyPair | None:
        """One CSR, from a new key to its issued certificate (None if stopped first).
        Raises KubeError, or CsrRefused when denied or failed."""
        key = ec.generate_private_key(ec.SECP256R1())
        created = self.kube.create(CSRS, csr_object(request_pem(key, self.request), self.request))
        name = str(created["metadata"]["name"])
        self.pending = name
        logger.warning(
            "kubelet serving certificate: CSR %s for node %s (signer %s) waits for approval; "
            "approve it with `kubectl certificate approve %s` or run an approver (docs/deploy.md)",
            name,
            self.request.node_name,
            SIGNER,
            name,
        )
        pem = self._wait_for_certificate(name, created)
        self.pending = None
        if pem is None:
            return None
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return certs.KeyPair(pem, key_pem)

    def _wait_for_certificate(self, name: str, csr: dict[str, Any]) -> bytes | None:
        path = f"{CSRS}/{name}"
        while not self._stop.is_set():
            pem = _issued(csr)
            if pem is not None:
                return pem
            rv = str(csr["metadata"].get("resourceVersion", ""))
            for kind, obj in self.kube.watch(
                CSRS, resource_version=rv, timeout_seconds=self.watch_timeout, fieldSelector=f"metadata.name={name}"
            ):
                if self._stop.is_set():
                    return None
                if kind == "DELETED":
                    raise CsrRefused(f"CSR {name} was deleted before it was issued")
                if kind in ("ADDED", "MODIFIED") and obj.get("metadata", {}).get("name") == name:
                    pem = _issued(obj)
                    if pem is not None:
                        return pem
            csr = self.kube.get(path)  # the watch ended: read it afresh, then watch again
        return None
