"""TLS material for the listeners: a CA and serving certificates made in memory with
`cryptography`, and the Twisted context factories built from them.

Called by `Listeners` when it builds its endpoints (and by tests and the bench to make
client certificates); the certificate sources (`certfiles`, `certcsr`) swap the serving pair
of a running `ServerTLS`. Private keys made here never touch the disk; only a CA bundle
(public) is ever written, and only where the caller says.
Tests: tests/vnode/kubelet/test_listeners.py, tests/vnode/kubelet/test_kubelet_certs.py,
tests/vnode/kubelet/test_kubelet_auth.py.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from OpenSSL import SSL
from twisted.internet import ssl

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True, repr=False)
class KeyPair:
    """A certificate and its private key, both PEM. repr never shows the key."""

    cert_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:
        return f"KeyPair(subject={x509.load_pem_x509_certificate(self.cert_pem).subject.rfc4514_string()!r})"


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str) -> KeyPair:
    """A fresh self-signed EC P-256 CA, valid for a year."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def issue(ca: KeyPair, common_name: str, *, hosts: tuple[str, ...] = (), client: bool = False) -> KeyPair:
    """A leaf certificate signed by `ca`: a server certificate for `hosts` (IPs or DNS
    names, the SAN), or a client certificate (`client=True`)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, "system:masters" if client else None))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(_sans(hosts)), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def _sans(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    return sans


def serving_hosts(bind_host: str, node_ip: str | None) -> tuple[str, ...]:
    """What a serving certificate names: the node IP (what the API server dials), the bound
    host when it is a concrete one, and the loopback names for local clients."""
    hosts = [h for h in (node_ip, bind_host) if h and h not in ("0.0.0.0", "::")]
    return tuple(dict.fromkeys([*hosts, "127.0.0.1", "localhost"]))


def load_ca_bundle(path: str) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle. Raises ValueError (with the path) if there is none."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ValueError(f"{path} holds no PEM certificate: {exc}") from exc


def load_pair(cert_path: str, key_path: str) -> KeyPair:
    """A serving certificate and key from PEM files (e.g. a cert-manager Secret's
    tls.crt and tls.key). Raises ValueError naming the file that is not what it should be."""
    try:
        cert_pem, key_pem = Path(cert_path).read_bytes(), Path(key_path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {exc.filename}: {exc.strerror}") from exc
    try:
        x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise ValueError(f"{cert_path} holds no PEM certificate") from exc
    try:
        serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{key_path} holds no unencrypted PEM private key") from exc
    pair = KeyPair(cert_pem, key_pem)
    try:
        _context(pair)
    except (ValueError, SSL.Error) as exc:
        raise ValueError(f"{key_path} is not the private key of the certificate in {cert_path}") from exc
    return pair


def fingerprint(cert_pem: bytes) -> str:
    """The SHA-256 (lower-case hex, of the DER) of the first certificate in `cert_pem`."""
    return x509.load_pem_x509_certificate(cert_pem).fingerprint(hashes.SHA256()).hex()


def not_after(cert_pem: bytes) -> datetime.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def _context(pair: KeyPair, client_ca_path: str | None = None) -> SSL.Context:
    """An OpenSSL server context serving `pair` (the whole chain in its certificate PEM).
    Raises ValueError or SSL.Error when the key is not the certificate's."""
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(SSL.TLS1_2_VERSION)
    chain = x509.load_pem_x509_certificates(pair.cert_pem)
    context.use_certificate(chain[0])
    for intermediate in chain[1:]:
        context.add_extra_chain_cert(intermediate)
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("the serving key must be an EC or RSA private key")
    context.use_privatekey(key)
    context.check_privatekey()
    if client_ca_path:
        context.load_verify_locations(client_ca_path)
        for ca in load_ca_bundle(client_ca_path):
            context.add_client_ca(ca)  # named in the request, so Go clients pick their cert
        context.set_verify(SSL.VERIFY_PEER, _recorded)
    return context


class ServerTLS(ssl.ContextFactory):
    """The OpenSSL server context for one listener, built from `cryptography` objects (the
    pyOpenSSL objects Twisted's CertificateOptions wants are deprecated).

    With `client_ca_path`, a client is asked for a certificate (those CAs named, so Go
    clients pick theirs) but may present none, as a kubelet asks; one presented is verified
    against those CAs and the handshake goes on either way: `auth.credentials_of` reads the
    verification result, and a certificate that failed it is a 401, not a silent anonymous.

    Twisted asks for the context at every new connection, so `replace` (from any thread)
    changes what new handshakes get; an open connection keeps the context it started with.
    """

    def __init__(self, pair: KeyPair, *, client_ca_path: str | None = None) -> None:
        self._pair = pair
        self._client_ca_path = client_ca_path
        self._context: SSL.Context | None = None

    @property
    def pair(self) -> KeyPair:
        return self._pair

    def replace(self, pair: KeyPair) -> None:
        """Serve `pair` to new connections. Raises ValueError (and keeps the current pair)
        when the key is not the certificate's."""
        try:
            context = _context(pair, self._client_ca_path)
        except SSL.Error as exc:
            raise ValueError(f"the new serving key does not match its certificate: {exc}") from exc
        self._pair, self._context = pair, context  # one assignment each: a reader sees old or new

    def getContext(self) -> SSL.Context:
        if self._context is None:
            self._context = _context(self._pair, self._client_ca_path)
        return self._context


VERIFY_ERROR = "nebula_verify_error"  # set on a pyOpenSSL Connection whose client certificate failed


def _recorded(connection: SSL.Connection, cert: object, errno: int, depth: int, ok: int) -> bool:
    # Accept, so the handshake completes, but keep OpenSSL's verdict on the connection for
    # authentication to read (`auth.credentials_of`): the kubelet too answers a bad certificate 401.
    if not ok and not getattr(connection, VERIFY_ERROR, 0):
        setattr(connection, VERIFY_ERROR, errno or -1)
    return True
