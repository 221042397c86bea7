"""TLS for tests: a WSGI app served over real HTTPS with its own CA (the console app as the
admission webhook), and plain HTTPS calls to a local listener such as the kubelet API.

Used by the placement and nebula_site webhook tests and the kubelet tests. Certificates come
from `devcluster.tls`; nothing here verifies a server unless the caller passes a context.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from devcluster import tls


def self_signed_certificate(
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, common_name: str, *, ip: str | None = None, ca: bool = False
) -> x509.Certificate:
    """A certificate for `key` signed by itself, valid for a day; `ip` adds an IP address SAN,
    `ca` marks it a CA (as a caBundle's single certificate is)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if ip is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False
        )
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    return builder.sign(key, hashes.SHA256())


def self_signed_server_context(directory: Path, common_name: str) -> ssl.SSLContext:
    """A TLS server context on a fresh self-signed EC certificate (valid for a day), its PEM
    files written to `directory` as cert.pem and key.pem."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = self_signed_certificate(key, common_name)
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


def read_head(conn: socket.socket, chunk: int = 65536) -> tuple[bytes, bytes] | None:
    """Read an HTTP message head from `conn`: (the head without its blank line, the bytes
    already read after it), or None if the peer closed first."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(chunk)
        if not data:
            return None
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head, rest


def kubelet_connection(port: int, *, context: ssl.SSLContext | None = None) -> http.client.HTTPSConnection:
    """A keep-alive HTTPS connection to a local listener (its certificate is not verified
    unless `context` says so)."""
    context = context or ssl._create_unverified_context()
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)


def https_get(port: int, path: str, *, context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    """One GET over TLS (the server's certificate is not verified unless `context` says so)."""
    connection = kubelet_connection(port, context=context)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


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
