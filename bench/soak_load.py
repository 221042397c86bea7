"""The clients of bench/soak.py, each surface's load in a child process of its own (the bench's
GIL and threads are never the manager's bottleneck): open to the cap and past it, report,
hold with a selector until told to close (a line on stdin), then close and report.

Run only by bench/soak.py (`python bench/soak_load.py SURFACE JSON`); it never measures the
manager itself. Smoke-tested with it: tests/bench/test_bench_soak.py.
"""

from __future__ import annotations

import json
import selectors
import socket
import ssl
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.clients.spdy import SpdyClient, UpgradeRefused  # noqa: E402

ADDR = "127.0.0.1"
FORWARD = ("portforward.k8s.io",)
FAILED = (OSError, TimeoutError, EOFError, UpgradeRefused, ssl.SSLError)
Opened = tuple[list[Any], int]  # (what is held open, how many were refused or failed)


def tls(options: dict[str, Any]) -> ssl.SSLContext:
    """No server check (loopback, a made-up CA); the client certificate when `cert` is given."""
    context = ssl._create_unverified_context()
    if options.get("cert"):
        context.load_cert_chain(options["cert"], options["key"])
    return context


def gone(sock: socket.socket) -> bool:
    """The server closed (or reset) this connection already."""
    try:
        sock.setblocking(False)
        return sock.recv(1) == b""
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def connections(options: dict[str, Any]) -> Opened:
    """`count` idle connections from one address: raw TCP (unauthenticated, nothing sent) or,
    with `cert`, TLS with the client certificate (handshake done, nothing sent)."""
    held: list[socket.socket] = []
    refused = 0
    context = tls(options) if options.get("cert") else None
    for _ in range(options["count"]):
        try:
            sock = socket.create_connection((ADDR, options["port"]), timeout=10)
            held.append(context.wrap_socket(sock) if context else sock)
        except FAILED:
            refused += 1
    time.sleep(1.0)  # a refusal at accept is a close: let it arrive
    alive = [s for s in held if not gone(s)]
    for sock in set(held) - set(alive):
        sock.close()
    return alive, refused + len(held) - len(alive)


def half_sent(options: dict[str, Any]) -> Opened:
    """`count` connections that send part of a request head and stop (metrics, console)."""
    held: list[socket.socket] = []
    refused = 0
    context = tls(options) if options.get("tls") else None
    head = f"GET {options['path']} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
    for _ in range(options["count"]):
        try:
            sock = socket.create_connection((ADDR, options["port"]), timeout=10)
            sock = context.wrap_socket(sock) if context else sock
            sock.sendall(head)
            held.append(sock)
        except FAILED:
            refused += 1
    time.sleep(1.0)
    alive = [s for s in held if not gone(s)]
    return alive, refused + len(held) - len(alive)


def console(options: dict[str, Any]) -> Opened:
    """`count` whole requests sent at once over TLS (answers read as they come), then
    `half` half-sent ones held; refused counts connections refused and answers not 200."""
    context, sent, refused = tls({}), [], 0
    for _ in range(options["count"]):
        try:
            sock = context.wrap_socket(socket.create_connection((ADDR, options["port"]), timeout=30))
            sent.append(sock)
        except FAILED:
            refused += 1
    statuses: dict[str, int] = {"refused at accept": refused} if refused else {}
    for sock in list(sent):
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        except FAILED:
            sent.remove(sock)
            refused += 1
    for sock in sent:
        try:
            status = sock.recv(64)[9:12].decode("latin-1") or "closed"
        except FAILED:
            status = "failed"
        statuses[status] = statuses.get(status, 0) + 1
        refused += 0 if status == "200" else 1
        sock.close()
    held, more = half_sent({**options, "count": options["half"], "tls": True, "path": "/healthz"})
    print(f"note {options['count']} whole requests at once: {statuses or 'none sent'}", flush=True)
    return held, refused + more


def followers(options: dict[str, Any]) -> Opened:
    """`count` authenticated `containerLogs?follow=true` streams of one Pod."""
    context, held, refused = tls(options), [], 0
    path = f"/containerLogs/{options['pod']}/main?follow=true"
    for _ in range(options["count"]):
        try:
            sock = context.wrap_socket(socket.create_connection((ADDR, options["port"]), timeout=10))
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            first = sock.recv(4096)
            if first.startswith(b"HTTP/1.1 200"):
                held.append(sock)
                continue
            sock.close()
        except FAILED:
            pass
        refused += 1
    return held, refused


def execs(options: dict[str, Any]) -> Opened:
    """`count` SPDY exec sessions running `cat`, each proved by an echo."""
    context, held, refused = tls(options), [], 0
    path = f"/exec/{options['pod']}/main?command=cat&input=1&output=1&error=1"
    for n in range(options["count"]):
        client = one_exec(context, options["port"], path, b"soak %d\n" % n)
        if client is None:
            refused += 1  # refused at the upgrade, or the session refused (said on its error stream)
        else:
            held.append(client)
    return held, refused


def one_exec(context: ssl.SSLContext, port: int, path: str, line: bytes) -> SpdyClient | None:
    """One exec session whose `cat` echoed `line`; None (and closed) if not."""
    client = None
    try:
        client = SpdyClient.connect((ADDR, port), path, ssl_context=context, timeout=15)
        streams = client.open_exec(stdin=True)
        out, error = streams["stdout"], streams["error"]
        client.send(streams["stdin"], line)
        client.wait_for(lambda: echoed(client, out, error, line), "the echo")
        if client.received(out).endswith(line):
            return client
    except FAILED:
        pass
    if client is not None:
        client.close()
    return None


def echoed(client: SpdyClient, data: int, error: int, line: bytes) -> bool:
    """The echo came back, or the stream was refused: closed, or the error stream spoke."""
    return client.received(data).endswith(line) or client.closed(data) or bool(client.received(error))


def forwards(options: dict[str, Any]) -> Opened:
    """`sessions` port-forward sessions with `each` connections to the echo port, each proved
    by an echo; a connection refused alone is counted, its session kept."""
    context, held, refused, echoing = tls(options), [], 0, 0
    for s in range(options["sessions"]):
        try:
            path = f"/portForward/{options['pod']}"
            client = SpdyClient.connect(
                (ADDR, options["port"]), path, protocols=FORWARD, ssl_context=context, timeout=15
            )
        except FAILED:
            refused += options["each"]
            continue
        held.append(client)
        for n in range(options["each"]):
            try:
                headers = [("port", str(options["remote"])), ("requestID", str(n))]
                error = client.open("error", headers=headers)
                client.finish(error)
                data = client.open("data", headers=headers)
                line = b"soak %d %d\n" % (s, n)
                client.send(data, line)
                client.wait_for(lambda c=client, d=data, e=error, x=line: echoed(c, d, e, x), "the echo", timeout=10)  # type: ignore[misc]
                if client.received(data).endswith(line):
                    echoing += 1
                    continue
            except FAILED:
                pass
            refused += 1  # this connection refused alone (its session goes on), or failed
    print(f"note {echoing} forwarded connections echoing in {len(held)} sessions", flush=True)
    return held, refused


SURFACES: dict[str, Callable[[dict[str, Any]], Opened]] = {
    "connections": connections,
    "metrics": half_sent,
    "console": console,
    "followers": followers,
    "execs": execs,
    "forwards": forwards,
}


def hold(held: list[Any]) -> tuple[int, float]:
    """Read (and drop) what the held sockets get until a line arrives on stdin (`allclosed`
    said once the server closed every one); returns how many the server closed meanwhile and
    when the last of them closed (seconds after ready)."""
    selector, started = selectors.DefaultSelector(), time.monotonic()
    socks = [getattr(h, "sock", h) for h in held]
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)
    closed, last = 0, 0.0
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is sys.stdin:
                sys.stdin.readline()
                return closed, last
            try:
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
            except (BlockingIOError, ssl.SSLWantReadError):
                continue
            except OSError:
                data = b""
            if not data:
                selector.unregister(key.fileobj)
                closed, last = closed + 1, time.monotonic() - started
        if len(selector.get_map()) == 1:  # only stdin left: the server closed every one
            print("allclosed", flush=True)
            sys.stdin.readline()
            return closed, last


def main(surface: str, options: dict[str, Any]) -> None:
    held, refused = SURFACES[surface](options)
    print(f"ready open={len(held)} refused={refused}", flush=True)
    closed, last = hold(held)
    for item in held:
        try:
            item.close()
        except OSError:
            pass
    print(f"closed server_closed={closed} last_close={last:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
