"""The kubelet serving certificate from files, over real TLS: loaded at start (a bad or
mismatched pair stops start-up), reloaded when the files change (new handshakes see the new
certificate, an open connection keeps working), and a broken new pair keeps the old one."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.polling import wait_for
from tests.support.servers.tls import kubelet_connection
from vnode.kubelet import certs
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners


def _write_pair(folder: Path, pair: certs.KeyPair) -> tuple[str, str]:
    """Write as cert-manager's Secret mount does: each file renamed into place."""
    cert, key = folder / "tls.crt", folder / "tls.key"
    for path, data in ((cert, pair.cert_pem), (key, pair.key_pem)):
        staging = path.with_suffix(".tmp")
        staging.write_bytes(data)
        os.replace(staging, path)
    return str(cert), str(key)


def _served_fingerprint(port: int) -> str:
    context = ssl._create_unverified_context()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


@pytest.fixture(scope="module")
def ca() -> certs.KeyPair:
    return certs.make_ca("test-kubelet-files-ca")


def _leaf(ca: certs.KeyPair) -> certs.KeyPair:
    return certs.issue(ca, "nebula-kubelet", hosts=("127.0.0.1",))


@pytest.fixture
def served(tmp_path: Path, ca: certs.KeyPair) -> Iterator[tuple[Listeners, certs.KeyPair]]:
    first = _leaf(ca)
    listeners = Listeners(
        HandlerRegistry(),
        kubelet=ListenerConfig("127.0.0.1", 0),
        node_ip="127.0.0.1",
        kubelet_cert=_write_pair(tmp_path, first),
        kubelet_cert_interval=0.05,
    )
    listeners.start()
    yield listeners, first
    listeners.stop()


def test_the_files_pair_is_served_and_a_replaced_pair_reaches_new_connections_only(
    served: tuple[Listeners, certs.KeyPair], tmp_path: Path, ca: certs.KeyPair
) -> None:
    listeners, first = served
    assert _served_fingerprint(listeners.kubelet_port) == certs.fingerprint(first.cert_pem)
    open_connection = kubelet_connection(listeners.kubelet_port)
    try:
        open_connection.request("GET", "/healthz")
        assert open_connection.getresponse().read() == b"ok"
        second = _leaf(ca)
        _write_pair(tmp_path, second)
        wait_for(
            lambda: _served_fingerprint(listeners.kubelet_port) == certs.fingerprint(second.cert_pem),
            what="the new certificate on a new connection",
        )
        open_connection.request("GET", "/healthz")  # same TLS session as before the reload
        assert open_connection.getresponse().read() == b"ok"
        assert open_connection.sock is not None
        der = open_connection.sock.getpeercert(binary_form=True)
        assert der is not None and hashlib.sha256(der).hexdigest() == certs.fingerprint(first.cert_pem)
    finally:
        open_connection.close()


def test_a_broken_or_mismatched_new_pair_is_logged_and_the_old_one_kept(
    served: tuple[Listeners, certs.KeyPair],
    tmp_path: Path,
    ca: certs.KeyPair,
    caplog: pytest.LogCaptureFixture,
) -> None:
    listeners, first = served
    caplog.set_level(logging.WARNING, logger="vnode.kubelet.certfiles")
    (tmp_path / "tls.crt").write_bytes(first.cert_pem[: len(first.cert_pem) // 2])  # half-written
    wait_for(lambda: "not a valid pair" in caplog.text, what="the warning about the half-written file")
    other = _leaf(ca)
    (tmp_path / "tls.crt").write_bytes(other.cert_pem)  # a new certificate, the old key: mismatched
    wait_for(lambda: caplog.text.count("not a valid pair") >= 2, what="the warning about the mismatched pair")
    assert _served_fingerprint(listeners.kubelet_port) == certs.fingerprint(first.cert_pem)
    assert first.key_pem.decode() not in caplog.text and "PRIVATE KEY" not in caplog.text
    (tmp_path / "tls.key").write_bytes(other.key_pem)  # the key catches up: the pair is whole again
    wait_for(
        lambda: _served_fingerprint(listeners.kubelet_port) == certs.fingerprint(other.cert_pem),
        what="the completed pair served",
    )


def test_a_mismatched_or_missing_pair_stops_start_up_naming_the_file(tmp_path: Path, ca: certs.KeyPair) -> None:
    cert, _ = _write_pair(tmp_path, _leaf(ca))
    stranger = tmp_path / "other.key"
    stranger.write_bytes(_leaf(ca).key_pem)
    for pair, words in (
        ((cert, str(stranger)), "is not the private key of the certificate"),
        ((cert, str(tmp_path / "absent.key")), "cannot read"),
        ((str(stranger), str(stranger)), "holds no PEM certificate"),
    ):
        listeners = Listeners(HandlerRegistry(), kubelet=ListenerConfig("127.0.0.1", 0), kubelet_cert=pair)
        with pytest.raises(ValueError, match=words):
            listeners.start()
        listeners.stop()
