"""TLS material and the kubeconfig: an in-memory self-signed CA and a server certificate, and
the client certificate the devcluster presents to kubelets (kube-apiserver's
`--kubelet-client-certificate`, user `kube-apiserver-kubelet-client`, signed by the cluster CA).

`DevCluster.start` calls `make_credentials`, `make_kubelet_client` and `kubeconfig_yaml`;
every connection to a kubelet takes its TLS context from `kubelet_client_context`. Nothing touches disk
except `write_kubeconfig`, and only at the path the caller gave. Keys never leave memory
except into the temporary files `ssl` needs to load them.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True, repr=False)
class Credentials:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    token: str
    ca_key_pem: bytes = b""  # signs the kubelet client certificate (`make_kubelet_client`)

    def __repr__(self) -> str:
        return "Credentials(<devcluster TLS material>)"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_credentials(host: str) -> Credentials:
    """A fresh EC P-256 CA and a server certificate for 127.0.0.1, localhost and `host`."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=365)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("devcluster-ca"))
        .issuer_name(_name("devcluster-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sans: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    try:
        address = ipaddress.ip_address(host)
        if str(address) != "127.0.0.1":
            sans.append(x509.IPAddress(address))
    except ValueError:
        if host and host != "localhost":
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("devcluster"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Credentials(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        token=secrets.token_urlsafe(24),
        ca_key_pem=ca_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


@dataclass(frozen=True, repr=False)
class KubeletClient:
    """The certificate the devcluster presents to kubelets, its key, and the CA that signed
    it (a kubelet's `--kubelet-client-ca`). repr never shows the key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:
        return f"KubeletClient(user={KUBELET_CLIENT_USER!r})"


def make_kubelet_client(credentials: Credentials) -> KubeletClient:
    """A client certificate signed by the cluster CA, as kubeadm signs kube-apiserver's (so a
    kubelet's client CA is the cluster CA, `kube-root-ca.crt`): CN `kube-apiserver-kubelet-client`
    and no group, so what it may do on a kubelet is what RBAC grants that user."""
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = x509.load_pem_x509_certificate(credentials.ca_pem)
    ca_key = serialization.load_pem_private_key(credentials.ca_key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(KUBELET_CLIENT_USER))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KubeletClient(
        ca_pem=credentials.ca_pem,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def kubelet_client_context(client: KubeletClient, *, kubelet_ca_path: str | None = None) -> ssl.SSLContext:
    """The TLS context of every devcluster connection to a kubelet (the logs/exec/attach proxy,
    the metrics scrape): it presents `client`'s certificate. Like kube-apiserver, it verifies
    the kubelet's serving certificate only given `--kubelet-certificate-authority`
    (`kubelet_ca_path`): then it must chain to that CA and name the address dialled (an IP
    SAN for an IP). Offers only http/1.1 in ALPN."""
    if kubelet_ca_path is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=kubelet_ca_path)
    context.set_alpn_protocols(["http/1.1"])
    _load_chain(context, client.cert_pem + client.key_pem)
    return context


def _load_chain(context: ssl.SSLContext, pem: bytes) -> None:
    # ssl can only load a key from a file; the directory lives only for the load.
    with tempfile.TemporaryDirectory(prefix="devcluster-tls-") as tmp:
        path = os.path.join(tmp, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        context.load_cert_chain(path)


def server_context(credentials: Credentials) -> ssl.SSLContext:
    """Server-side TLS offering only http/1.1 in ALPN (kubectl then never tries HTTP/2)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    # ssl can only load a key from a file; the directory lives only for the load.
    with tempfile.TemporaryDirectory(prefix="devcluster-tls-") as tmp:
        path = os.path.join(tmp, "server.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(credentials.cert_pem + credentials.key_pem)
        context.load_cert_chain(path)
    return context


def kubeconfig_yaml(url: str, credentials: Credentials) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "devcluster",
                "cluster": {
                    "server": url,
                    "certificate-authority-data": base64.b64encode(credentials.ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "devcluster", "user": {"token": credentials.token}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": "devcluster"}}],
        "current-context": "devcluster",
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_kubeconfig(path: str, url: str, credentials: Credentials) -> None:
    """Write the kubeconfig owner-readable only (it holds the bearer token), whole or not at all:
    a reader waiting for the file never sees half of it."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=directory, prefix=".kubeconfig-")  # created 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(kubeconfig_yaml(url, credentials))
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise
