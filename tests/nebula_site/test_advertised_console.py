"""What a leader publishes about its console (`nebula_site.manager.listeners.advertised_console`):
the address other replicas can dial (the bound host, else the node IP) and, over TLS, the fingerprint of the very
certificate the listener serves, as a client sees it on the wire."""

from __future__ import annotations

import socket
import ssl

import pytest

from console import leaderpeer
from nebula_site.manager import listeners as manager_listeners
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners


def served_fingerprint(port: int) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only the certificate's bytes matter here
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return leaderpeer.fingerprint_of(der)


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_the_published_console_is_the_bound_address_pinned_to_the_served_certificate(tls: bool) -> None:
    listeners = Listeners(
        HandlerRegistry(),
        kubelet=ListenerConfig("127.0.0.1", 0),
        console=ListenerConfig("127.0.0.1", 0),
        console_tls=tls,
    )
    listeners.start()
    try:
        port = listeners.console_port
        assert port is not None
        peer = manager_listeners.advertised_console(listeners, bind_host="127.0.0.1", node_ip="10.0.0.7")
        wildcard = manager_listeners.advertised_console(listeners, bind_host="", node_ip="10.0.0.7")
        nowhere = manager_listeners.advertised_console(listeners, bind_host="", node_ip=None)
        on_the_wire = served_fingerprint(port) if tls else None
    finally:
        listeners.stop()
    scheme = "https" if tls else "http"
    assert peer == leaderpeer.Peer(f"{scheme}://127.0.0.1:{port}", on_the_wire)
    assert wildcard == leaderpeer.Peer(f"{scheme}://10.0.0.7:{port}", on_the_wire)  # every interface: the node IP
    assert nowhere is None  # nothing another replica could dial
