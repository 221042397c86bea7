"""I7 by cost, over real TLS sockets (vnode/kubelet/conncaps.py): a connection whose client
certificate the listener's client CA verified (the API server's, carrying every `logs -f` and
exec of the node through one address) leaves the per-client cap for `authenticated_total`;
anonymous connections and certificates that fail verification keep the per-client cap."""

from __future__ import annotations

import contextlib
import http.client
import logging
import re
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.polling import wait_for
from tests.support.rigs.console import Records
from vnode.kubelet import certs, conncaps, loop
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners

REFUSED = re.compile(
    r"kubelet listener: refused (\d+) connection\(s\) over the caps \(8 per client, \d+ in all, 3 auth"
)


@pytest.fixture(scope="module")
def client_ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[certs.KeyPair, str]:
    ca = certs.make_ca("kubelet-client-ca")
    path = tmp_path_factory.mktemp("ca") / "client-ca.crt"
    path.write_bytes(ca.cert_pem)
    return ca, str(path)


@contextlib.contextmanager
def listeners(ca_path: str, bounds: Limits) -> Iterator[Listeners]:
    running = Listeners(
        HandlerRegistry(), kubelet=ListenerConfig("127.0.0.1", 0), node_ip="127.0.0.1", client_ca=ca_path, bounds=bounds
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def context(tmp_path: Path, pair: certs.KeyPair | None) -> ssl.SSLContext:
    made = ssl._create_unverified_context()
    if pair is not None:
        (tmp_path / "client.pem").write_bytes(pair.cert_pem + pair.key_pem)
        made.load_cert_chain(tmp_path / "client.pem")
    return made


def served(port: int, tls: ssl.SSLContext) -> http.client.HTTPSConnection:
    """A kept-alive connection that has been answered once (its handshake done at the server)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=30)
    try:
        conn.request("GET", "/healthz")
        with conn.getresponse() as response:
            response.read()
            assert response.status in (200, 401), response.status
    except BaseException:
        conn.close()
        raise
    return conn


def refused_at_accept(port: int) -> bool:
    """True when the listener closes a new plain connection at once, nothing answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"\x16\x03\x01")  # the start of a ClientHello: a served one waits for the rest
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


def caps_of(running: Listeners) -> tuple[dict[str, int], int, int]:
    """(open by address, authenticated, refused) of the kubelet listener, read on the reactor."""

    def read() -> tuple[dict[str, int], int, int]:
        factory: Any = running._ports["kubelet"].factory
        return dict(factory.open), len(factory.authenticated), factory.refused

    return loop.on_reactor(read)


def test_I7_an_authenticated_api_server_is_not_held_to_the_per_client_cap(
    client_ca: tuple[certs.KeyPair, str], tmp_path: Path
) -> None:
    ca, path = client_ca
    apiserver = certs.issue(ca, "kube-apiserver-kubelet-client", client=True)
    with listeners(path, Limits(per_client=8)) as running:
        port = running.kubelet_port
        held = [served(port, context(tmp_path, apiserver)) for _ in range(40)]
        anonymous = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(8)]
        wait_for(lambda: caps_of(running)[:2] == ({"127.0.0.1": 8}, 40), what="40 authenticated, 8 anonymous")
        assert refused_at_accept(port)  # a 9th anonymous one
        for conn in held:  # every authenticated connection is still open and served
            conn.request("GET", "/healthz")
            with conn.getresponse() as response:
                assert response.status == 200
                response.read()
        assert caps_of(running)[1:] == (40, 1)
        for conn in held:
            conn.close()
        for sock in anonymous:
            sock.close()
        wait_for(lambda: caps_of(running)[:2] == ({}, 0), what="every connection counted out")


def test_I7_a_certificate_that_fails_verification_is_held_to_the_per_client_cap(
    client_ca: tuple[certs.KeyPair, str], tmp_path: Path
) -> None:
    _, path = client_ca
    stranger = certs.issue(certs.make_ca("another-ca"), "kube-apiserver-kubelet-client", client=True)
    with listeners(path, Limits(per_client=8)) as running:
        port = running.kubelet_port
        held = [served(port, context(tmp_path, stranger)) for _ in range(8)]  # answered 401
        wait_for(lambda: caps_of(running)[:2] == ({"127.0.0.1": 8}, 0), what="8 unauthenticated connections")
        assert refused_at_accept(port)
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            served(port, context(tmp_path, stranger))
        assert caps_of(running)[1:] == (0, 2)
        for conn in held:
            conn.close()


def test_I7_authenticated_connections_past_authenticated_total_are_closed_counted_and_logged(
    client_ca: tuple[certs.KeyPair, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conncaps, "LOG_EVERY", 0.5)
    kept = Records()
    logger = logging.getLogger("vnode.kubelet")
    logger.addHandler(kept)
    ca, path = client_ca
    apiserver = certs.issue(ca, "kube-apiserver-kubelet-client", client=True)
    try:
        with listeners(path, Limits(per_client=8, authenticated_total=3)) as running:
            port = running.kubelet_port
            held = [served(port, context(tmp_path, apiserver)) for _ in range(3)]
            with pytest.raises((ssl.SSLError, ConnectionError, OSError, http.client.HTTPException)):
                served(port, context(tmp_path, apiserver))  # handshake done, then closed unanswered
            wait_for(lambda: caps_of(running) == ({}, 3, 1), what="3 authenticated, 1 refused, none left open")

            def said() -> int:
                return sum(int(m.group(1)) for r in kept.records if (m := REFUSED.search(r.getMessage())))

            wait_for(lambda: said() == 1, what="the refusal in the log")
            for conn in held:
                conn.request("GET", "/healthz")
                with conn.getresponse() as response:
                    assert response.status == 200
                    response.read()
                conn.close()
            wait_for(lambda: caps_of(running)[:2] == ({}, 0), what="the authenticated connections counted out")
            served(port, context(tmp_path, apiserver)).close()  # a place again
    finally:
        logger.removeHandler(kept)
    assert not [r for r in kept.records if r.exc_info]
