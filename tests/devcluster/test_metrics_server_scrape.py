"""The embedded metrics-server's dial (`metricsscrape.fetch_resource_metrics`) against a real
TLS listener standing for a kubelet: a whole answer is read; an oversize one (I7), one cut
short and a non-200 are refused, never parsed in part."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import pytest

from devcluster.metricsscrape import MAX_SCRAPE_BYTES, fetch_resource_metrics
from tests.support.servers import rawlisteners as tlsserver

BODY = b"node_cpu_usage_seconds_total 1 1000\n"


class Kubelet(tlsserver.Listener):
    """Answers every connection with `answer` (then closes), over TLS."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = b""
        self.context = tlsserver.kubelet_context()
        self.start()

    def handle(self, raw: socket.socket) -> None:
        try:
            with self.context.wrap_socket(raw, server_side=True) as conn:
                conn.recv(65536)
                conn.sendall(self.answer)
        except (OSError, ssl.SSLError):
            pass


@pytest.fixture
def kubelet() -> Iterator[Kubelet]:
    server = Kubelet()
    yield server
    server.close()


def _head(length: int, status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {length}\r\n\r\n".encode()


def test_a_whole_answer_is_read_through_the_proxys_dial(kubelet: Kubelet) -> None:
    kubelet.answer = _head(len(BODY)) + BODY
    assert fetch_resource_metrics("127.0.0.1", kubelet.port, 10.0) == BODY.decode()
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    kubelet.answer = chunked
    assert fetch_resource_metrics("127.0.0.1", kubelet.port, 10.0) == BODY.decode()


def test_I7_an_answer_over_the_cap_is_refused_not_buffered(kubelet: Kubelet) -> None:
    size = MAX_SCRAPE_BYTES + 1024 * 1024
    kubelet.answer = _head(size) + b"#" * size
    with pytest.raises(ValueError, match="over"):
        fetch_resource_metrics("127.0.0.1", kubelet.port, 10.0)


def test_an_answer_cut_short_or_not_200_is_refused(kubelet: Kubelet) -> None:
    kubelet.answer = _head(len(BODY) + 10) + BODY
    with pytest.raises(ValueError, match="ended early"):
        fetch_resource_metrics("127.0.0.1", kubelet.port, 10.0)
    kubelet.answer = _head(2, "403 Forbidden") + b"no"
    with pytest.raises(ValueError, match="403"):
        fetch_resource_metrics("127.0.0.1", kubelet.port, 10.0)
