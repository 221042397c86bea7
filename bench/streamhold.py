"""The hold test of bench/streams.py: `logs -f` followers, exec sessions and port-forwards, all
from ONE address with a client certificate the kubelet listener's client CA signed (as the API
server carries every stream of a node), opened one after another (an API server's pace, not one
burst) and held; the server's threads, RSS and open fds before, while held (and at the peak) and
after close, and the clients' error count. The clients run in a child process (`load`), so the
figures are the server's alone. Imported by bench/streams.py only.
"""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.portforward import PROTOCOLS, open_pair
from providers.fake import FakeProvider
from tests.support.clients.spdy import SpdyClient
from vnode.handler import Handler
from vnode.kubelet import certs
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import Listeners

PODS = 10
ECHO_PORT = 9000
PING_EVERY = 5.0  # seconds between two lines sent on every exec session and forwarded connection


def client_ca(folder: Path) -> tuple[str, str]:
    """(client CA bundle, client certificate+key PEM) written under `folder`: the listener
    verifies the one with the other, so every hold connection counts as authenticated."""
    ca = certs.make_ca("bench-kubelet-client-ca")
    issued = certs.issue(ca, "kube-apiserver-kubelet-client", client=True)
    (folder / "client-ca.crt").write_bytes(ca.cert_pem)
    (folder / "client.pem").write_bytes(issued.cert_pem + issued.key_pem)
    return str(folder / "client-ca.crt"), str(folder / "client.pem")


def figures() -> tuple[int, float, int]:
    """(OS threads, RSS in MB, open fds) of this process: the server's."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024, len(os.listdir("/proc/self/fd"))


def said(label: str, sample: tuple[int, float, int]) -> str:
    return f"{label}: threads {sample[0]}, RSS {sample[1]:.0f} MB, fds {sample[2]}"


# -- the server side (this process) -----------------------------------------------------------
def hold(
    server: Listeners, registry: HandlerRegistry, pem: str, adopt: Callable[[Handler, str, tuple[str, ...]], None],
    offline: Callable[[FakeProvider], Handler], followers: int, execs: int, forwards: int, seconds: float,
) -> None:  # fmt: skip
    scenario = {"log": {"interval": 1.0}, "ports": {"echo": [ECHO_PORT]}}
    provider = FakeProvider("fake", {"cloud": f"bench-{uuid.uuid4().hex}", "scenario": scenario})
    handler = offline(provider)
    registry.add(handler)
    for i in range(PODS):
        adopt(handler, f"held-{i}", ("sleep",))
    time.sleep(2)  # the adoption's own threads settle
    before = peak = figures()
    command = [sys.executable, sys.argv[0], "--load-client", str(server.kubelet_port), pem]
    command += [str(followers), str(execs), str(forwards), str(seconds)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    lines: list[str] = []
    held = None

    def read() -> None:
        assert child.stdout is not None
        lines.extend(line.strip() for line in child.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    opened = time.monotonic()
    while child.poll() is None:
        sample = figures()
        peak = (max(peak[0], sample[0]), max(peak[1], sample[1]), max(peak[2], sample[2]))
        if held is None and any(line.startswith("load: all open") for line in lines):
            held = sample
            print(f"hold: every stream open after {time.monotonic() - opened:.1f} s", flush=True)
        time.sleep(0.5)
    reader.join()
    errors = next((int(x.split("=")[1]) for x in lines if x.startswith("errors=")), -1)
    deadline = time.monotonic() + 30  # the load has gone: every follower and session must wind down
    while figures()[0] > before[0] + 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    after = figures()
    left = sorted({thread.name.rstrip("0123456789_-") for thread in threading.enumerate()})
    caps = server.streams
    print(
        f"hold {followers} logs -f + {execs} exec + {forwards} port-forwards for {seconds:.0f}s from one "
        f"authenticated address: errors={errors} (target 0)\n  {said('before', before)}\n"
        f"  {said('held', held or (0, 0.0, 0))}\n  {said('peak', peak)}\n  {said('after close', after)} "
        f"(Python threads left: {', '.join(left)})\n"
        f"  stream caps refused: sessions {caps.sessions.refused}, forwards {caps.forwards.refused}, "
        f"followers {caps.followers.refused}; client lines: {[x for x in lines if not x.startswith('load:')][:5]}",
        flush=True,
    )
    registry.remove(handler)


# -- the clients (a child process) ------------------------------------------------------------
def load(port: int, pem: str, followers: int, execs: int, forwards: int, seconds: float) -> int:
    """Open every stream one after another, keep them `seconds` (a line echoed on each exec and
    forward every PING_EVERY), close them; count what went wrong."""
    tls = ssl._create_unverified_context()
    tls.load_cert_chain(pem)
    errors = 0
    # SPDY clients first: the test client uses select(), which takes fds below 1024 only.
    sessions: list[tuple[SpdyClient, dict[str, int]]] = []
    for i in range(execs):
        path = f"/exec/bench/held-{i % PODS}/main?command=cat&input=1&output=1&error=1"
        client = SpdyClient.connect(("127.0.0.1", port), path, ssl_context=tls, timeout=60)
        sessions.append((client, client.open_exec(stdin=True)))
    pairs: list[tuple[SpdyClient, int, int]] = []
    for n in range(forwards):
        path = f"/portForward/bench/held-{n % PODS}"
        client = SpdyClient.connect(("127.0.0.1", port), path, protocols=PROTOCOLS, ssl_context=tls, timeout=60)
        pairs.append((client, *open_pair(client, ECHO_PORT, n)))
    selector = selectors.DefaultSelector()
    socks = []
    for i in range(followers):
        sock = tls.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=60))
        sock.sendall(f"GET /containerLogs/bench/held-{i % PODS}/main?follow=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, bytearray())
        socks.append(sock)
    print(f"load: all open ({followers} followers, {execs} exec sessions, {forwards} forwards)", flush=True)
    deadline = time.monotonic() + seconds
    next_ping, rounds = time.monotonic(), 0
    while time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.5):
            try:
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
            except (ssl.SSLWantReadError, BlockingIOError):
                continue
            except OSError:
                data = b""
            if not data:
                errors += 1
                selector.unregister(key.fileobj)
            elif not key.data:
                key.data.extend(data)
                errors += 0 if data.startswith(b"HTTP/1.1 200") else 1
        if time.monotonic() >= next_ping:
            next_ping, rounds = next_ping + PING_EVERY, rounds + 1
            errors += ping(sessions, pairs, rounds)
    for client, streams in sessions:
        try:
            result = client.communicate(streams)
            errors += 0 if b"Success" in result.error and result.stdout.startswith(b"ping") else 1
        except (OSError, TimeoutError, EOFError):
            errors += 1
        client.close()
    for client, error, data in pairs:
        try:
            client.finish(data)
            client.wait_closed([data, error])
            errors += 1 if client.received(error) or data in client.resets else 0
        except (OSError, TimeoutError, EOFError):
            errors += 1
        client.close()
    for sock in socks:
        sock.close()
    return errors


def ping(sessions: list[tuple[SpdyClient, dict[str, int]]], pairs: list[tuple[SpdyClient, int, int]], n: int) -> int:
    errors = 0
    for index, (client, streams) in enumerate(sessions):
        try:
            client.send(streams["stdin"], b"ping %d\n" % index)
        except (OSError, TimeoutError, EOFError):
            errors += 1
    for index, (client, _, data) in enumerate(pairs):
        line = b"ping %d %d\n" % (index, n)
        try:
            client.send(data, line)
            client.wait_for(lambda c=client, d=data, e=line: bytes(c.data[d]).endswith(e), "the echo")  # type: ignore[misc]
        except (OSError, TimeoutError, EOFError):
            errors += 1
    return errors
