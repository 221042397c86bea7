"""`CsrSigner`: kube-controller-manager's `kubernetes.io/kubelet-serving` signer for the devcluster.

Started and stopped by `DevCluster`. Each pass signs every approved, not failed, not yet
issued CSR of that signer with the devcluster's kubelet serving CA, after the real signer's
checks (`kubelet_serving_problem`); a request that fails them gets a Failed condition
(SignerValidationFailure) and no certificate. CSRs of other signers are left pending, as a
cluster without their signer leaves them. Writes only CSR status.
Tests: tests/devcluster/test_csr.py, tests/vnode/kubelet/test_kubelet_certs_csr.py.
"""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devcluster import csrkind
from devcluster.controlloop import ControlLoop
from devcluster.errors import ApiError
from devcluster.registry import ResourceType
from devcluster.resources import Resources, timestamp
from devcluster.watch import Change

KUBELET_SERVING = "kubernetes.io/kubelet-serving"
DEFAULT_DURATION = datetime.timedelta(days=365)  # --cluster-signing-duration
BACKDATE = datetime.timedelta(minutes=5)  # the real signer backdates notBefore for clock skew
_WITH_RSA = {"digital signature", "key encipherment", "server auth"}
_WITHOUT_RSA = {"digital signature", "server auth"}
_EKU = {"server auth": ExtendedKeyUsageOID.SERVER_AUTH, "client auth": ExtendedKeyUsageOID.CLIENT_AUTH}


@dataclass(frozen=True, repr=False)
class SigningCA:
    """The CA the signer signs with (PEM). repr never shows the key."""

    cert_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:
        return "SigningCA(...)"


def make_signing_ca(common_name: str = "devcluster-kubelet-serving-ca") -> SigningCA:
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return SigningCA(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def load_signing_ca(cert_path: str, key_path: str) -> SigningCA:
    """kube-controller-manager's --cluster-signing-cert-file and --cluster-signing-key-file."""
    with open(cert_path, "rb") as cert, open(key_path, "rb") as key:
        ca = SigningCA(cert.read(), key.read())
    x509.load_pem_x509_certificate(ca.cert_pem)
    serialization.load_pem_private_key(ca.key_pem, password=None)
    return ca


def kubelet_serving_problem(request: x509.CertificateSigningRequest, usages: list[str]) -> str | None:
    """Why the kubelet-serving signer refuses `request`, or None: the rules of the real one."""
    if set(usages) != _WITH_RSA and set(usages) != _WITHOUT_RSA:
        return f"usages did not match {sorted(_WITH_RSA)}"
    try:
        sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = x509.SubjectAlternativeName([])
    if not sans.get_values_for_type(x509.DNSName) and not sans.get_values_for_type(x509.IPAddress):
        return "DNS or IP subjectAltName is required"
    if sans.get_values_for_type(x509.RFC822Name):
        return "Email subjectAltNames are not allowed"
    if sans.get_values_for_type(x509.UniformResourceIdentifier):
        return "URI subjectAltNames are not allowed"
    organizations = [a.value for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if organizations != ["system:nodes"]:
        return "subject organization is not system:nodes"
    names = [a.value for a in request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if len(names) != 1 or not str(names[0]).startswith("system:node:"):
        return "subject common name does not begin with system:node:"
    return None


def sign(
    ca: SigningCA,
    request: x509.CertificateSigningRequest,
    usages: list[str],
    *,
    seconds: int | None,
    now: datetime.datetime,
) -> bytes:
    """The certificate (PEM) for `request`: its subject and SANs, `usages`, valid for
    `seconds` (at most the signing duration and never past the CA)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    duration = min(DEFAULT_DURATION, datetime.timedelta(seconds=seconds)) if seconds else DEFAULT_DURATION
    not_after = min(now + duration, ca_cert.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(request.subject)
        .issuer_name(ca_cert.subject)
        .public_key(request.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE if duration > BACKDATE else now)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(usages), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    ekus = [_EKU[u] for u in usages if u in _EKU]
    if ekus:
        builder = builder.add_extension(x509.ExtendedKeyUsage(ekus), critical=False)
    try:
        sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        builder = builder.add_extension(sans, critical=False)
    except x509.ExtensionNotFound:
        pass
    return builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _key_usage(usages: list[str]) -> x509.KeyUsage:
    has = set(usages).__contains__
    return x509.KeyUsage(
        has("digital signature"), has("content commitment"), has("key encipherment"), has("data encipherment"),
        has("key agreement"), has("cert sign"), has("crl sign"), False, False,
    )  # fmt: skip


def node_ip_sans(cert_pem: bytes) -> list[str]:
    """The IP SANs of a certificate, as strings (for tests and messages)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]


class CsrSigner(ControlLoop):
    name = "devcluster-csr-signer"

    def __init__(self, resources: Resources, ca: SigningCA, *, interval: float = 1.0) -> None:
        super().__init__(resources, interval=interval)
        self.ca = ca

    def wants(self, change: Change) -> bool:
        return change.storage_key == f"{csrkind.GROUP}/certificatesigningrequests"

    def run_once(self) -> None:
        rt = self.resources.builtin(csrkind.GROUP, "v1", "certificatesigningrequests")
        for csr in self.resources.store.list_objects(rt.storage_key)[0]:
            spec, status = csr.get("spec") or {}, csr.get("status") or {}
            kinds = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
            if spec.get("signerName") != KUBELET_SERVING or status.get("certificate"):
                continue
            if csrkind.APPROVED not in kinds or kinds & {csrkind.DENIED, csrkind.FAILED}:
                continue
            self._sign(rt, csr)

    def _sign(self, rt: ResourceType, csr: dict[str, Any]) -> None:
        meta, spec = csr["metadata"], csr["spec"]
        request = csrkind.parse_request(csr)
        usages = [str(u) for u in spec.get("usages") or []]
        now = self.resources.clock()
        status = dict(csr.get("status") or {})
        problem = kubelet_serving_problem(request, usages)
        if problem is not None:
            failed = {
                "type": csrkind.FAILED,
                "status": "True",
                "reason": "SignerValidationFailure",
                "message": f"invalid certificate request: {problem}",
                "lastUpdateTime": timestamp(now),
            }
            status["conditions"] = [*status.get("conditions", []), failed]
        else:
            seconds = spec.get("expirationSeconds")
            pem = sign(self.ca, request, usages, seconds=seconds if isinstance(seconds, int) else None, now=now)
            status["certificate"] = base64.b64encode(pem).decode()
        body = {**csr, "status": status}
        try:
            self.resources.replace(rt, "", str(meta["name"]), body, subresource="status")
        except ApiError:  # changed or deleted meanwhile: the next pass sees the new state
            return
