"""The HTTP transport: a threading HTTPS server, request parsing, replies, watch and proxy streams.

`DevCluster` starts `ApiServer`; each connection gets a thread that does the TLS handshake,
then HTTP/1.1 keep-alive requests handed to `Api.handle`. Bounds live here (body size, handshake
timeout; header limits in `httphead`). It never interprets resources itself.
Tests: tests/devcluster/test_server.py, test_httphead.py.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from devcluster import httphead, proxy, tunnel
from devcluster.api import MAX_BODY, Api, Info, ProxyReply, Reply, Request, WatchReply, json_reply
from devcluster.errors import failure_status
from devcluster.requestlog import RequestLog, RequestRecord
from devcluster.store import Store
from devcluster.watchstream import WatchHub

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 300.0
DRAIN_LIMIT = 4 * MAX_BODY


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = True
    # socketserver's default backlog is 5: a burst of new connections (a manager's workers all
    # dialling at once) overflowed it and each dropped SYN came back after Linux's 1 s retry.
    # A real API server listens with the kernel's somaxconn.
    request_queue_size = socket.SOMAXCONN

    def __init__(
        self,
        address: tuple[str, int],
        *,
        api: Api,
        store: Store,
        request_log: RequestLog,
        tls: ssl.SSLContext | None,
        bookmark_interval: float,
        kubelet_tls: ssl.SSLContext | None = None,
    ) -> None:
        self.api = api
        self.kubelet_tls = kubelet_tls  # `tls.kubelet_client_context`: how every kubelet is dialled
        self.store = store
        self.request_log = request_log
        self.tls = tls
        self.bookmark_interval = bookmark_interval
        self.stopping = threading.Event()
        self.hub = WatchHub(store, bookmark_interval=bookmark_interval)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, Handler)

    def track(self, sock: socket.socket, *, add: bool) -> None:
        with self._connections_lock:
            if add:
                self._connections.add(sock)
            else:
                self._connections.discard(sock)

    def drop_connections(self) -> None:
        """Wake every connection thread (idle keep-alive reads, proxied streams) so close can join them.

        The shutdown goes through a duplicate descriptor: a TLS socket's own `shutdown` would
        drop its SSL state under the thread still reading it. Under the lock a tracked socket
        is still open (`Handler.finish` untracks before closing), so the descriptor is its own.
        """
        with self._connections_lock:
            for sock in self._connections:
                fd = sock.fileno()
                if fd < 0:
                    continue
                try:
                    with socket.socket(fileno=os.dup(fd)) as duplicate:
                        duplicate.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "devcluster"
    sys_version = ""
    server: ApiServer
    timeout = IDLE_TIMEOUT
    head: httphead.Head
    raw_requestline: bytes

    def setup(self) -> None:
        raw: socket.socket = self.request
        self._raw = raw
        # Headers and body go out as separate writes; without this Nagle and delayed ACK add 40 ms.
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.server.tls is not None:
            raw.settimeout(HANDSHAKE_TIMEOUT)
            self.request = self.server.tls.wrap_socket(raw, server_side=True)
        self.server.track(self.request, add=True)
        super().setup()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.request, add=False)
            if self.request is not self._raw:
                # The TLS socket took over the descriptor; socketserver only closes the raw one.
                try:
                    self.request.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.request.close()

    def parse_request(self) -> bool:
        head = httphead.parse_request(self, self.raw_requestline)
        if head is None:
            return False
        self.head = head
        return True

    def date_time_string(self, timestamp: float | None = None) -> str:
        return httphead.http_date(time.time() if timestamp is None else timestamp)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Transport-level errors (long request line, too many headers) as Status JSON too."""
        body = json.dumps(failure_status(code, "BadRequest" if code < 500 else "InternalError", message or "")).encode()
        self.close_connection = True
        try:
            self.send_response(code, message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _serve(self) -> None:
        started = time.time()
        info = Info(verb=self.command.lower())
        split = urlsplit(self.path)
        code = 500
        logged = False
        try:
            body = self._read_body()
            if isinstance(body, Reply):
                reply: Reply | WatchReply | ProxyReply = body
            else:
                headers = dict(self.head.last)
                query = parse_qsl(split.query, keep_blank_values=True)
                request = Request(self.command, split.path, query, headers, body)
                if split.path == "/debug/requests":
                    reply = json_reply(200, [r.to_json() for r in self.server.request_log.snapshot()])
                else:
                    reply = self.server.api.handle(request, info)
            code = 200 if isinstance(reply, WatchReply | ProxyReply) else reply.code
            # Logged before answering: a client may count the log as soon as it has its answer,
            # and a watch may stay open for the whole test.
            if split.path != "/debug/requests":
                self._log(started, info, split.path, code)
            logged = True
            if isinstance(reply, WatchReply):
                self._watch(reply)
            elif isinstance(reply, ProxyReply):
                self._proxy(reply, body if isinstance(body, bytes) else b"")
            else:
                self._send(reply)
        except OSError:
            self.close_connection = True
        except Exception:  # the catch-all: a bug must answer 500 and be logged, never hang the client
            log.exception("internal error serving %s %s", self.command, self.path)
            code = 500
            self._send(json_reply(500, failure_status(500, "InternalError", "internal error; see the server log")))
        finally:
            if split.path != "/debug/requests" and not logged:
                self._log(started, info, split.path, code)

    def _log(self, started: float, info: Info, path: str, code: int) -> None:
        self.server.request_log.append(
            RequestRecord(
                time=started,
                verb=info.verb,
                resource=info.resource,
                subresource=info.subresource,
                namespace=info.namespace,
                name=info.name,
                user_agent=self.head.first.get("user-agent", ""),
                code=code,
                path=path,
            )
        )

    def _read_body(self) -> bytes | Reply:
        if self.head.first.get("transfer-encoding", "").lower() == "chunked":
            return self._read_chunked()
        length_text = self.head.first.get("content-length") or "0"
        try:
            length = int(length_text)
        except ValueError:
            self.close_connection = True
            return json_reply(400, failure_status(400, "BadRequest", "invalid Content-Length"))
        if length > MAX_BODY:
            if length <= DRAIN_LIMIT:
                # Drain so the client can finish sending and read the 413 instead of a reset.
                remaining = length
                while remaining > 0:
                    chunk = self.rfile.read(min(remaining, 65536))
                    if not chunk:
                        break
                    remaining -= len(chunk)
            self.close_connection = True
            return _too_large()
        return self.rfile.read(length) if length > 0 else b""

    def _read_chunked(self) -> bytes | Reply:
        data = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                return json_reply(400, failure_status(400, "BadRequest", "malformed chunked body"))
            if size == 0:
                while self.rfile.readline(1024).strip():
                    pass
                return bytes(data)
            if len(data) + size > MAX_BODY:
                self.close_connection = True
                return _too_large()
            data += self.rfile.read(size)
            self.rfile.readline(1024)

    def _send(self, reply: Reply) -> None:
        """The reply as one write (one TLS record): the head http.server's send_response and
        send_header calls wrote, byte for byte, then the body."""
        if log.isEnabledFor(logging.DEBUG):
            self.log_request(reply.code)
        lines = [
            f"Content-Type: {reply.content_type}\r\n",
            f"Content-Length: {len(reply.body)}\r\n",
            "Cache-Control: no-cache, private\r\n",
        ]
        lines += [f"Warning: {warning_header(text)}\r\n" for text in reply.warnings]
        if self.close_connection:
            lines.append("Connection: close\r\n")
        head = b""
        if self.request_version != "HTTP/0.9":
            status = self.responses[reply.code][0] if reply.code in self.responses else ""
            server = f"Server: {self.version_string()}\r\nDate: {self.date_time_string()}\r\n"
            text = f"{self.protocol_version} {reply.code} {status}\r\n{server}{''.join(lines)}\r\n"
            head = text.encode("latin-1", "strict")
        self.wfile.write(head + reply.body if self.command != "HEAD" else head)
        self.wfile.flush()

    def _watch(self, reply: WatchReply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()
        self.connection.setblocking(False)  # the hub writes without ever blocking on this client
        try:
            stream = self.server.hub.serve(reply, self.connection)
        finally:
            self.connection.settimeout(60.0)  # a client that stopped reading must not pin this thread
        if stream.client_gone:
            self.close_connection = True
            return
        if self.server.stopping.is_set():
            self.close_connection = True
        self.wfile.write(bytes(stream.pending) + b"0\r\n\r\n")
        self.wfile.flush()
        self.connection.settimeout(IDLE_TIMEOUT)

    def _proxy(self, reply: ProxyReply, body: bytes) -> None:
        self.close_connection = True
        headers = [(k, v) for k, v in self.headers.items()]
        self.connection.settimeout(None)
        client = proxy.ClientConnection(rfile=self.rfile, wfile=self.wfile, sock=self.connection)
        try:
            if reply.subresource == "portforward" and tunnel.tunnelled_protocols(headers):
                tunnel.forward(
                    client, host=reply.host, port=reply.port, target=reply.target, headers=headers,
                    tls_context=self.server.kubelet_tls,
                )  # fmt: skip
            else:
                proxy.forward(
                    client, host=reply.host, port=reply.port, method=self.command, target=reply.target,
                    headers=headers, body=body, tls_context=self.server.kubelet_tls,
                )  # fmt: skip
        except proxy.ProxyError as err:
            # kube-apiserver's words: logs are fetched with an HTTP client (Go's url.Error), the
            # streaming subresources through the upgrade-aware proxy; neither error is an API
            # status, so both answer 500 with no reason ("Error from server: ..." in kubectl).
            host = f"[{reply.host}]" if ":" in reply.host else reply.host
            if reply.subresource == "log":
                message = f'Get "https://{host}:{reply.port}{reply.target}": {err}'
            else:
                message = f"error dialing backend: {err}"
            self._send(json_reply(500, failure_status(500, "", message)))


def _too_large() -> Reply:
    message = f"the request body is too large (limit {MAX_BODY} bytes)"
    return json_reply(413, failure_status(413, "RequestEntityTooLarge", message))


def warning_header(text: str) -> str:
    """An RFC 7234 `Warning` value as the API server writes one: code 299, agent `-`, the
    text quoted (backslash and quote escaped; line breaks, which a header cannot carry, as spaces)."""
    flat = " ".join(text.splitlines())
    return '299 - "' + flat.replace("\\", "\\\\").replace('"', '\\"') + '"'
