"""The kubelet proxy behind `pods/{name}/log|exec|attach|portforward`.

The HTTP layer picks the node's address (`nodeaddress`), calls `kubelet_location` to
rewrite the subresource request into the kubelet path exactly as kube-apiserver does, then
`forward` to relay it over TLS to that address: upgrades (SPDY, websocket) are pumped byte
for byte, normal answers are streamed as they arrive. It never buffers a whole body and
never writes to the client before the kubelet has answered, so a failed dial can still
become a Status.
"""

from __future__ import annotations

import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

MAX_HEAD_BYTES = 64 * 1024
_READ_SIZE = 64 * 1024
# RFC 7230 hop-by-hop headers, the set Go's httputil.ReverseProxy strips (plus Authorization:
# the kubelet authenticates the API server, never the end user's token).
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_REQUEST_DROPPED = _HOP_BY_HOP | {"authorization", "host", "content-length", "expect"}

__all__ = ["ClientConnection", "LocationError", "ProxyError", "forward", "kubelet_location"]


class ProxyError(Exception):
    """The kubelet could not be reached or gave no usable answer; nothing was written to the client."""


class LocationError(ValueError):
    """Subresource options the API server would refuse (400): bad integers, no streams, no container."""


def kubelet_location(
    subresource: str, namespace: str, pod: str, container: str | None, query: list[tuple[str, str]]
) -> str:
    """The kubelet path and query for a pod subresource, as kube-apiserver's pod strategy builds it.

    `log` -> `/containerLogs/{ns}/{pod}/{container}` with the PodLogOptions re-encoded;
    `exec`/`attach` -> `/{exec|attach}/{ns}/{pod}/{container}` with `stdin/stdout/stderr/tty`
    turned into `input/output/error/tty=1` and `command` kept in order; `portforward` ->
    `/portForward/{ns}/{pod}` with `ports` joined into `port`. The query is encoded like Go's
    `url.Values.Encode` (sorted keys), and `container` (when None, taken from the query) moves
    into the path.
    """
    values: dict[str, list[str]] = {}
    for name, value in query:
        values.setdefault(name, []).append(value)
    if subresource == "portforward":
        ports = [p for v in values.get("ports", []) for p in v.split(",") if p]
        for port in ports:
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise LocationError(f"invalid port {port!r}: must be between 1 and 65535")
        params = [("port", ",".join(ports))] if ports else []
        return _location("portForward", namespace, pod, None, params)
    if subresource not in ("log", "exec", "attach"):
        raise LocationError(f"pods/{subresource} is not a proxied subresource")
    container = container or values.get("container", [""])[0]
    if not container:
        raise LocationError(f"a container name must be specified for pod {pod}")
    if subresource == "log":
        return _location("containerLogs", namespace, pod, container, _log_params(values))
    params = [(wire, "1") for name, wire in _STREAM_FLAGS if _flag(values, name)]
    if not params:
        raise LocationError("you must specify at least 1 of stdin, stdout, stderr")
    if subresource == "exec":
        params += [("command", c) for c in values.get("command", [])]
        if not values.get("command"):
            raise LocationError("you must specify at least one command for the container")
    return _location(subresource, namespace, pod, container, params)


_STREAM_FLAGS = (("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty"))


def _flag(values: dict[str, list[str]], name: str) -> bool:
    # apimachinery's query conversion: absent is false, "0" and "false" (any case) are false, all else true.
    given = values.get(name)
    if not given:
        return False
    return given[0] != "0" and given[0].lower() != "false"


def _log_params(values: dict[str, list[str]]) -> list[tuple[str, str]]:
    params = [(name, "true") for name in ("follow", "previous", "timestamps") if _flag(values, name)]
    for name in ("sinceSeconds", "tailLines", "limitBytes"):
        text = values.get(name, [""])[0]
        if text:
            try:
                params.append((name, str(int(text))))
            except ValueError:
                raise LocationError(f"{name}: invalid integer {text!r}") from None
    since_time = values.get("sinceTime", [""])[0]
    if since_time:
        try:
            parsed = datetime.fromisoformat(since_time.replace("z", "Z"))
        except ValueError:
            raise LocationError(f"sinceTime: {since_time!r} is not an RFC 3339 time") from None
        if parsed.tzinfo is None:
            raise LocationError(f"sinceTime: {since_time!r} has no time zone")
        params.append(("sinceTime", parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")))
    stream = values.get("stream", [""])[0]
    if stream:
        params.append(("stream", stream))
    return params


def _location(kind: str, namespace: str, pod: str, container: str | None, params: list[tuple[str, str]]) -> str:
    segments = [kind, namespace, pod] + ([container] if container is not None else [])
    path = "/" + "/".join(urllib.parse.quote(s, safe="") for s in segments)
    params = sorted(params, key=lambda item: item[0])  # stable: repeated keys keep their order
    query = "&".join(f"{urllib.parse.quote_plus(k, safe='')}={urllib.parse.quote_plus(v, safe='')}" for k, v in params)
    return f"{path}?{query}" if query else path


class ByteReader(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


class ByteWriter(Protocol):
    def write(self, data: bytes, /) -> int | None: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class ClientConnection:
    """The client side of a proxied request, as the HTTP layer holds it.

    `rfile` may already hold bytes the client pipelined after the request head (the start
    of a SPDY session); they are forwarded first. `sock` is used only for half-closes.
    """

    rfile: ByteReader
    wfile: ByteWriter
    sock: socket.socket


def forward(
    client: ClientConnection,
    *,
    host: str,
    port: int,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes,
    tls_context: ssl.SSLContext | None = None,
    timeout: float = 30.0,
) -> None:
    """Relay one request to `https://host:port{target}` and its answer back to the client.

    Steps: dial (TLS, certificate not verified unless `tls_context` says so), send the
    request with hop-by-hop headers removed (upgrade headers kept for an upgrade), read the
    answer head within `timeout`; a 101 is written out and both directions pumped until
    each side has closed, anything else is streamed (status, headers, then the body chunk
    by chunk). Raises `ProxyError` only before the first byte reaches the client; after
    that a broken stream ends the client connection instead. The caller must not reuse
    the client connection after an upgrade.
    """
    upgrade = _upgrade_requested(headers)
    head = _request_head(method, target, host, port, headers, body, upgrade, _peer_ip(client.sock))
    upstream = _Upstream(_dial(host, port, tls_context, timeout))
    try:
        try:
            upstream.stream.sendall(head + body)
            status, response_head = upstream.read_response_head()
            while 100 <= status < 200 and status != 101:
                status, response_head = upstream.read_response_head()
        except (OSError, ValueError) as exc:
            raise ProxyError(f"error talking to the kubelet at {host}:{port}: {exc}") from exc
        if status == 101 and not upgrade:
            raise ProxyError(f"the kubelet at {host}:{port} switched protocols on a plain request")
        upstream.stream.raw.settimeout(None)
        if status == 101:
            _write(client, response_head)
            _pump(client, upstream, linger=timeout)
        else:
            _relay_response(client, upstream, status, response_head, method)
    finally:
        upstream.stream.raw.close()


def _upgrade_requested(headers: list[tuple[str, str]]) -> bool:
    return "upgrade" in _connection_tokens(headers) and any(name.lower() == "upgrade" for name, _ in headers)


def _connection_tokens(headers: list[tuple[str, str]]) -> set[str]:
    return {t.strip().lower() for name, value in headers if name.lower() == "connection" for t in value.split(",")}


def _peer_ip(sock: socket.socket) -> str | None:
    try:
        peer = sock.getpeername()
    except OSError:
        return None
    return str(peer[0]) if isinstance(peer, tuple) else None


def _request_head(
    method: str,
    target: str,
    host: str,
    port: int,
    headers: list[tuple[str, str]],
    body: bytes,
    upgrade: bool,
    client_ip: str | None,
) -> bytes:
    named = _connection_tokens(headers)
    host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}"]
    forwarded_for = None
    for name, value in headers:
        lower = name.lower()
        if lower in _REQUEST_DROPPED or lower in named:
            continue
        if lower == "x-forwarded-for":
            forwarded_for = value
            continue
        lines.append(f"{name}: {value}")
    if client_ip is not None:
        lines.append(f"X-Forwarded-For: {forwarded_for + ', ' if forwarded_for else ''}{client_ip}")
    if upgrade:
        lines.append("Connection: Upgrade")
        lines.extend(f"Upgrade: {value}" for name, value in headers if name.lower() == "upgrade")
    else:
        lines.append("Connection: close")
    if body or method.upper() in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _dial(host: str, port: int, tls_context: ssl.SSLContext | None, timeout: float) -> _TlsStream:
    context = tls_context or _unverified_context()
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise ProxyError(_dial_error(host, port, exc)) from exc
    stream = _TlsStream(raw, context, host)
    try:
        stream.handshake()
    except (OSError, ValueError) as exc:
        raw.close()
        raise ProxyError(f"TLS handshake with the kubelet at {host}:{port} failed: {exc}") from exc
    return stream


def _dial_error(host: str, port: int, exc: OSError) -> str:
    """A failed dial in the words of Go's net package, which kube-apiserver passes on."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(exc, socket.gaierror):
        detail = (
            "no such host" if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) else exc.strerror
        )
        return f"dial tcp: lookup {host}: {detail}"
    if isinstance(exc, ConnectionRefusedError):
        return f"dial tcp {address}: connect: connection refused"
    if isinstance(exc, TimeoutError):
        return f"dial tcp {address}: i/o timeout"
    return f"dial tcp {address}: connect: {exc.strerror or exc}"


def _unverified_context() -> ssl.SSLContext:
    # A dev API server holds no kubelet CA: like kube-apiserver without --kubelet-certificate-authority,
    # it accepts the kubelet's self-signed serving certificate.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])
    return context


class _TlsStream:
    """TLS to the kubelet through memory BIOs over a plain socket.

    Why not an SSLSocket: the pump reads and writes from two threads, and an OpenSSL object
    must not be used concurrently (here every TLS call holds one lock, and no lock is held
    while blocked on the socket); and a half-close needs a close_notify before the FIN,
    which SSLSocket cannot send while still reading (an OpenSSL 3 peer treats a bare FIN
    as a fatal error and can no longer write its answer).
    """

    def __init__(self, raw: socket.socket, context: ssl.SSLContext, host: str) -> None:
        self.raw = raw
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=host)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()

    def handshake(self) -> None:
        while True:
            try:
                with self._lock:
                    self._tls.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                if not self._feed():
                    raise ConnectionError("connection closed during the TLS handshake") from None

    def _flush(self) -> None:
        with self._send_lock:
            with self._lock:
                data = self._outgoing.read()
            if data:
                self.raw.sendall(data)

    def _feed(self) -> bool:
        data = self.raw.recv(_READ_SIZE)
        if data:
            with self._lock:
                self._incoming.write(data)
        return bool(data)

    def recv(self, size: int) -> bytes:
        """Up to `size` decrypted bytes; b"" at the end of the stream (close_notify or FIN)."""
        while True:
            with self._lock:
                try:
                    data: bytes | None = self._tls.read(size)
                except ssl.SSLWantReadError:
                    data = None
                except ssl.SSLZeroReturnError:
                    data = b""
            self._flush()
            if data is not None:
                return data
            if not self._feed():
                return b""

    def sendall(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[self._tls.write(view) :]
        self._flush()

    def close_write(self) -> None:
        """Half-close: close_notify, then FIN; reading goes on until the kubelet closes too."""
        with self._lock:
            try:
                self._tls.unwrap()
            except ssl.SSLError:
                pass  # SSLWantReadError: our close_notify is queued, the kubelet's has not come yet
        try:
            self._flush()
        except OSError:
            pass
        _shutdown(self.raw, socket.SHUT_WR)


class _Upstream:
    """The kubelet connection with a small read buffer, for parsing heads and chunk framing."""

    def __init__(self, stream: _TlsStream) -> None:
        self.stream = stream
        self._buffer = bytearray()

    def _fill(self) -> bool:
        data = self.stream.recv(_READ_SIZE)
        self._buffer += data
        return bool(data)

    def take_buffered(self) -> bytes:
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    def read_some(self) -> bytes:
        if not self._buffer and not self._fill():
            return b""
        return self.take_buffered()

    def read_response_head(self) -> tuple[int, bytes]:
        """The status code and the raw head (status line to blank line), at most MAX_HEAD_BYTES."""
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise ValueError(f"response head larger than {MAX_HEAD_BYTES} bytes")
            if not self._fill():
                raise ValueError("connection closed before a complete response head")
        if end + 4 > MAX_HEAD_BYTES:
            raise ValueError(f"response head larger than {MAX_HEAD_BYTES} bytes")
        head = bytes(self._buffer[: end + 4])
        del self._buffer[: end + 4]
        parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"malformed status line {head[:80]!r}")
        return int(parts[1]), head

    def read_line(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise ValueError("chunk framing line too long")
            if not self._fill():
                raise ValueError("connection closed inside chunk framing")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def iter_exact(self, size: int) -> Iterator[bytes]:
        """Yield exactly `size` bytes in the pieces they arrive in."""
        while size > 0:
            if not self._buffer and not self._fill():
                raise ValueError("connection closed inside the body")
            piece = bytes(self._buffer[:size])
            del self._buffer[: len(piece)]
            size -= len(piece)
            yield piece


def _write(client: ClientConnection, data: bytes) -> None:
    client.wfile.write(data)
    client.wfile.flush()


def _parse_headers(head: bytes) -> list[tuple[str, str]]:
    headers = []
    for line in head.decode("latin-1").split("\r\n")[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return headers


def _relay_response(client: ClientConnection, upstream: _Upstream, status: int, head: bytes, method: str) -> None:
    headers = _parse_headers(head)
    named = _connection_tokens(headers)
    reason = head.split(b"\r\n", 1)[0].split(b" ", 2)[2:] or [b""]
    chunked = any(n.lower() == "transfer-encoding" and "chunked" in v.lower() for n, v in headers)
    lengths = [v for n, v in headers if n.lower() == "content-length"]
    no_body = method.upper() == "HEAD" or status in (204, 304)
    length = int(lengths[0]) if lengths and lengths[0].isdigit() and not chunked else None
    out = [f"HTTP/1.1 {status} ".encode("latin-1") + reason[0]]
    for name, value in headers:
        lower = name.lower()
        if lower in _HOP_BY_HOP or lower in named or (lower == "content-length" and length is None and not no_body):
            continue
        out.append(f"{name}: {value}".encode("latin-1"))
    if not no_body and length is None:
        out.append(b"Transfer-Encoding: chunked")
    _write(client, b"\r\n".join(out) + b"\r\n\r\n")
    try:
        if no_body:
            return
        if length is not None:
            for piece in upstream.iter_exact(length):
                _write(client, piece)
        elif chunked:
            _relay_chunks(client, upstream)
        else:
            while data := upstream.read_some():
                _write(client, b"%x\r\n%s\r\n" % (len(data), data))
            _write(client, b"0\r\n\r\n")
    except (OSError, ValueError):
        # Mid-body failure: the client cannot be told with a Status any more, and its
        # connection is no longer framed correctly, so end it.
        _shutdown(client.sock, socket.SHUT_RDWR)


def _relay_chunks(client: ClientConnection, upstream: _Upstream) -> None:
    while True:
        size_text = upstream.read_line().split(b";", 1)[0].strip()
        size = int(size_text, 16)
        if size == 0:
            while upstream.read_line():
                pass  # trailers are dropped, as the API server's proxy does for streaming bodies
            _write(client, b"0\r\n\r\n")
            return
        _write(client, b"%x\r\n" % size)
        for piece in upstream.iter_exact(size):
            _write(client, piece)
        if upstream.read_line():
            raise ValueError("chunk data not followed by CRLF")
        _write(client, b"\r\n")


def _shutdown(sock: socket.socket, how: int) -> None:
    # socket.socket.shutdown, not SSLSocket.shutdown: on the client's TLS socket the latter
    # drops the TLS layer while the other direction is still reading through it. A bare FIN
    # at a record boundary reads as EOF to Go's crypto/tls (kubectl).
    try:
        socket.socket.shutdown(sock, how)
    except OSError:
        pass


def _pump(client: ClientConnection, upstream: _Upstream, *, linger: float) -> None:
    """Copy both directions until both have ended, each end's EOF passed on as a half-close."""

    def client_to_upstream() -> None:
        try:
            while data := client.rfile.read1(_READ_SIZE):
                upstream.stream.sendall(data)
        finally:
            upstream.stream.close_write()

    def upstream_to_client() -> None:
        try:
            _copy_down(upstream, lambda data: _write(client, data))
        finally:
            _shutdown(client.sock, socket.SHUT_WR)

    _both_ways(client, upstream, client_to_upstream, upstream_to_client, linger=linger, name="kubelet-proxy")


def _copy_down(upstream: _Upstream, send: Callable[[bytes], None]) -> None:
    """Hand the kubelet's bytes (what the head parser buffered first) to `send` until its EOF."""
    data = upstream.take_buffered()
    while True:
        if data:
            send(data)
        data = upstream.stream.recv(_READ_SIZE)
        if not data:
            return


def _both_ways(
    client: ClientConnection,
    upstream: _Upstream,
    up: Callable[[], None],
    down: Callable[[], None],
    *,
    linger: float,
    name: str,
) -> None:
    """Run the `up` and `down` copiers in threads `{name}-up`/`{name}-down` until both end.

    A copier ends on EOF or on an OSError/ValueError (swallowed: the connection is gone).
    Once one has ended the other gets `linger` seconds to finish before both sockets are
    shut down, so a peer that never closes cannot hold the thread forever.
    """
    finished = threading.Semaphore(0)

    def run(copy: Callable[[], None]) -> None:
        try:
            copy()
        except (OSError, ValueError):
            pass
        finally:
            finished.release()

    threads = [
        threading.Thread(target=run, args=(up,), name=f"{name}-up", daemon=True),
        threading.Thread(target=run, args=(down,), name=f"{name}-down", daemon=True),
    ]
    for thread in threads:
        thread.start()
    finished.acquire()
    if not finished.acquire(timeout=linger):
        _shutdown(client.sock, socket.SHUT_RDWR)
        _shutdown(upstream.stream.raw, socket.SHUT_RDWR)
    for thread in threads:
        thread.join()
