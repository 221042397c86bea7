"""Which address and port of a Node kube-apiserver dials to reach its kubelet.

Called by the API layer before it proxies `pods/{name}/log|exec|attach|portforward`; pure
(reads a Node's status, never dials). The preferred order is the DevCluster's
`kubelet_preferred_address_types`, kube-apiserver's `--kubelet-preferred-address-types`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# kube-apiserver's --kubelet-preferred-address-types default, and its default kubelet port.
DEFAULT_PREFERRED_ADDRESS_TYPES = ("Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP")
DEFAULT_KUBELET_PORT = 10250


class NoAddressError(ValueError):
    """The node publishes no address of a preferred type (kube-apiserver answers 500)."""


def kubelet_address(status: Mapping[str, Any], preferred: Sequence[str]) -> tuple[str, int]:
    """The host and port kube-apiserver dials for a node with this `status`.

    As its GetPreferredNodeAddress: the first address of the first type in `preferred` that
    the node has, with no fallback to the next type when that address does not answer. The
    port is `daemonEndpoints.kubeletEndpoint.Port`, or 10250 when it is not positive.
    Raises NoAddressError, worded as kube-apiserver's.
    """
    addresses = [a for a in status.get("addresses") or [] if isinstance(a, Mapping)]
    host = next((str(a.get("address")) for kind in preferred for a in addresses if a.get("type") == kind), None)
    if not host:
        known = " ".join(f"{{{a.get('type')} {a.get('address')}}}" for a in addresses)
        raise NoAddressError(f"no preferred addresses found; known addresses: [{known}]")
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    return host, port if isinstance(port, int) and port > 0 else DEFAULT_KUBELET_PORT
