"""Port-forward figures for bench/streams.py: download throughput through one forwarded
connection (a local Pod sending zeros), and a hold of many forwards on the fake provider's
echo port. Each runs its client in a child process; imported by bench/streams.py only.
"""

from __future__ import annotations

import ssl
import sys
import time

from tests.support.clients.spdy import SpdyClient

TLS = ssl._create_unverified_context()
PROTOCOLS = ("portforward.k8s.io",)


def open_pair(client: SpdyClient, port: int, request_id: int) -> tuple[int, int]:
    headers = [("port", str(port)), ("requestID", str(request_id))]
    error = client.open("error", headers=headers)
    client.finish(error)
    return error, client.open("data", headers=headers)


def download(kubelet_port: int, target: str, total: int) -> int:
    """Child: `target` is `pod:port` of a source server; ask it for `total` bytes."""
    pod, port = target.split(":")
    path = f"/portForward/bench/{pod}"
    with SpdyClient.connect(("127.0.0.1", kubelet_port), path, protocols=PROTOCOLS, ssl_context=TLS, timeout=300) as c:
        error, data = open_pair(c, int(port), 0)
        c.send(data, b"%d\n" % total, fin=True)
        c.wait_closed([data], 300)
        got = len(c.data[data])
        c.data[data] = bytearray()
    assert got == total, got
    return got


def hold(kubelet_port: int, pod: str, port: int, forwards: int, seconds: float) -> int:
    """Child: `forwards` sessions with one connection each to the echo `port`, each echoing a
    line every 5 s for `seconds`; then each half-closes and must see a clean end. Errors counted."""
    errors = 0
    sessions: list[tuple[SpdyClient, int, int]] = []
    for n in range(forwards):
        client = SpdyClient.connect(
            ("127.0.0.1", kubelet_port), f"/portForward/bench/{pod}", protocols=PROTOCOLS, ssl_context=TLS, timeout=60
        )
        sessions.append((client, *open_pair(client, port, n)))
    print(f"load: {forwards} port-forwards open", flush=True)
    deadline, rounds = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        rounds += 1
        for n, (client, _, data) in enumerate(sessions):
            line = b"ping %d %d\n" % (n, rounds)
            try:
                client.send(data, line)
                client.wait_for(lambda c=client, d=data, e=line: bytes(c.data[d]).endswith(e), "the echo")  # type: ignore[misc]
            except (OSError, TimeoutError, EOFError):
                errors += 1
        time.sleep(max(0.0, min(5.0, deadline - time.monotonic())))
    for client, error, data in sessions:
        try:
            client.finish(data)
            client.wait_closed([data, error])
            errors += 1 if client.received(error) or data in client.resets else 0
        except (OSError, TimeoutError, EOFError):
            errors += 1
        client.close()
    return errors


if __name__ == "__main__":
    sys.exit("run bench/streams.py")
