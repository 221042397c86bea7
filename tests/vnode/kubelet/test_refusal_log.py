"""The connection caps' log line (vnode/kubelet/conncaps.py `ConnectionCaps`), over real sockets:
every refused connection is counted in some line (the last ones too, said LOG_EVERY after the
previous line), lines are at most one per LOG_EVERY, and none carries a traceback, at DEBUG too;
nor does any refused, broken or abandoned connection of the metrics listener."""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.polling import wait_for
from tests.support.rigs.console import Records
from tests.support.rigs.vnode import loopback_listeners
from tests.support.servers.tls import self_signed_certificate
from vnode.kubelet import conncaps
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry

REFUSED = re.compile(r"console listener: refused (\d+) connection\(s\) over the caps \(2 per client")


@pytest.fixture
def kept() -> Iterator[Records]:
    """Every record of the listener's loggers, at DEBUG (a handler of the test's own: the
    process's logging set-up may replace the root's handlers)."""
    handler = Records()
    loggers = [logging.getLogger(name) for name in ("vnode.kubelet", "twisted", "daphne")]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.addHandler(handler)
        each.setLevel(logging.DEBUG)
    yield handler
    for each, level in zip(loggers, levels, strict=True):
        each.removeHandler(handler)
        each.setLevel(level)


def test_I7_every_refused_connection_is_counted_in_the_log_and_none_logs_a_traceback(
    kept: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conncaps, "LOG_EVERY", 0.5)
    with loopback_listeners(HandlerRegistry(), Limits(per_client=2)) as running:
        held = [socket.create_connection(("127.0.0.1", running.console_port), timeout=10) for _ in range(2)]
        wait_for(lambda: sum(running_caps_open(running).values()) == 2, what="the two held connections counted")
        for _ in range(88):
            with socket.create_connection(("127.0.0.1", running.console_port), timeout=10) as refused:
                assert refused.recv(1) == b""  # closed at accept, nothing read or answered

        def counted() -> int:
            return sum(int(m.group(1)) for r in kept.records if (m := REFUSED.search(r.getMessage())))

        wait_for(lambda: counted() == 88, what="88 refusals counted in the log", timeout=30)
        lines = [r for r in kept.records if REFUSED.search(r.getMessage())]
        for sock in held:
            sock.close()
    assert counted() == 88
    assert 1 <= len(lines) <= 2 + int((lines[-1].created - lines[0].created) / 0.5), [r.getMessage() for r in lines]
    assert not [r for r in kept.records if r.exc_info or "Traceback" in r.getMessage()]


def running_caps_open(running: object) -> dict[str, int]:
    """The console listener's open connections by client address, as its caps count them."""
    port = running._ports["console"]  # type: ignore[attr-defined]
    return dict(port.factory.open)


def test_I7_the_metrics_listener_logs_no_traceback_for_refused_broken_or_abandoned_connections(
    kept: Records, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """At DEBUG: connections over the cap, a TLS handshake that is garbage and one cut off
    mid-record log no traceback (the thread-per-connection listener before logged ten lines
    for each broken connection)."""
    from nebula_site.manager.listeners import MetricsListener

    monkeypatch.setattr(conncaps, "LOG_EVERY", 0.5)
    private = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "tls.crt").write_bytes(
        self_signed_certificate(private, "nebula-metrics", ip="127.0.0.1").public_bytes(serialization.Encoding.PEM)
    )
    (tmp_path / "tls.key").write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    extra = [logging.getLogger(name) for name in ("nebula_site", "console")]
    for each in extra:
        each.addHandler(kept)
    listener = MetricsListener("127.0.0.1", 0, cert=(str(cert), str(key)), bounds=Limits(per_client=2, head_timeout=1))
    listener.start()
    try:
        held = [socket.create_connection(("127.0.0.1", listener.port), timeout=10) for _ in range(2)]
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", listener.port), timeout=10) as refused:
                assert refused.recv(1) == b""
        for sock in held:
            sock.sendall(b"\x16\x03\x01\x00\x05garbage-not-tls")  # a handshake that is not one
            sock.close()
        wait_for(lambda: listener.held() == 0, what="the broken connections closed")
        with socket.create_connection(("127.0.0.1", listener.port), timeout=10) as cut:
            cut.sendall(b"\x16\x03\x01")  # cut off mid-record
        wait_for(lambda: listener.held() == 0, what="the cut connection closed", timeout=30)
    finally:
        listener.stop()
        for each in extra:
            each.removeHandler(kept)
    said = [re.search(r"metrics listener: refused (\d+) connection", r.getMessage()) for r in kept.records]
    assert sum(int(m.group(1)) for m in said if m) == 5, [r.getMessage() for r in kept.records]
    assert not [r for r in kept.records if r.exc_info or "Traceback" in r.getMessage()]
