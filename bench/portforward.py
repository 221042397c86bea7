"""Port-forward figures for bench/streams.py: download throughput through one forwarded
connection (a local Pod sending zeros), its client in a child process, and the pair opening
the hold (bench/streamhold.py) shares. Imported by bench/streams.py and bench/streamhold.py only.
"""

from __future__ import annotations

import ssl
import sys

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


if __name__ == "__main__":
    sys.exit("run bench/streams.py")
