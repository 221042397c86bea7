"""Which node address the kubelet proxy dials: kube-apiserver's GetPreferredNodeAddress (first
address of the first preferred type, no fallback), its default port, and its error text."""

from __future__ import annotations

from typing import Any

import pytest

from devcluster import nodeaddress

HOSTNAME = {"type": "Hostname", "address": "n1.invalid"}
INTERNAL_IP = {"type": "InternalIP", "address": "10.0.0.2"}
INTERNAL_DNS = {"type": "InternalDNS", "address": "kubelet.nebula.svc"}
EXTERNAL_IP = {"type": "ExternalIP", "address": "192.0.2.9"}


def _status(*addresses: dict[str, str], port: int = 10250) -> dict[str, Any]:
    return {"addresses": list(addresses), "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}


@pytest.mark.parametrize(
    ("status", "preferred", "expected"),
    [
        (_status(INTERNAL_IP, HOSTNAME), nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES, ("n1.invalid", 10250)),
        (
            _status(EXTERNAL_IP, INTERNAL_IP, INTERNAL_DNS),
            nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES,
            ("kubelet.nebula.svc", 10250),
        ),
        (_status(EXTERNAL_IP, INTERNAL_IP), nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES, ("10.0.0.2", 10250)),
        (_status(EXTERNAL_IP), nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES, ("192.0.2.9", 10250)),
        (_status(INTERNAL_IP, HOSTNAME), ("InternalIP", "Hostname"), ("10.0.0.2", 10250)),
        (_status(INTERNAL_IP, port=10255), nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES, ("10.0.0.2", 10255)),
        (_status(INTERNAL_IP, port=0), nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES, ("10.0.0.2", 10250)),
        ({"addresses": [INTERNAL_IP]}, nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES, ("10.0.0.2", 10250)),
    ],
)
def test_kubelet_address_is_the_first_address_of_the_first_preferred_type_the_node_has(
    status: dict[str, Any], preferred: tuple[str, ...], expected: tuple[str, int]
) -> None:
    """kube-apiserver's GetPreferredNodeAddress, and its default port when the node gives none."""
    assert nodeaddress.kubelet_address(status, preferred) == expected


@pytest.mark.parametrize(
    ("status", "preferred", "message"),
    [
        ({}, nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES, "no preferred addresses found; known addresses: []"),
        (
            _status(INTERNAL_IP, EXTERNAL_IP),
            ("Hostname",),
            "no preferred addresses found; known addresses: [{InternalIP 10.0.0.2} {ExternalIP 192.0.2.9}]",
        ),
    ],
)
def test_kubelet_address_without_a_preferred_type_is_kube_apiservers_error(
    status: dict[str, Any], preferred: tuple[str, ...], message: str
) -> None:
    with pytest.raises(nodeaddress.NoAddressError) as raised:
        nodeaddress.kubelet_address(status, preferred)
    assert str(raised.value) == message
