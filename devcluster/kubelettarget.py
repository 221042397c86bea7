"""Where a Pod's log, exec, attach or port-forward request goes: the kubelet address of the
Pod's node and the kubelet path, with the API server's errors for a Pod that has none.

`api.Api` calls `locate` for those subresources and hands the answer to the server to proxy.
Reads the store only; never dials anything.
Tests: tests/devcluster/test_proxy.py, tests/devcluster/test_nodeaddress.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from devcluster import nodeaddress, proxy
from devcluster.errors import ApiError, bad_request, not_found
from devcluster.resources import Resources
from devcluster.routing import ResourceRoute


def locate(
    resources: Resources,
    route: ResourceRoute,
    query: list[tuple[str, str]],
    container: str | None,
    preferred_address_types: Sequence[str],
) -> tuple[str, int, str]:
    """(host, port, kubelet path) for `route`; 400 for an unbound Pod or an unnamed container
    of several, 404 for a missing Pod or node, a reasonless 500 for a node without an address."""
    pod = resources.get(route.rt, route.namespace or "", route.name)
    spec = pod.get("spec") or {}
    node_name = spec.get("nodeName")
    if not node_name:
        raise bad_request(f"pod {route.name} does not have a host assigned")
    node = resources.store.get("/nodes", "", node_name)
    if node is None:
        raise not_found("nodes", node_name)
    try:
        host, port = nodeaddress.kubelet_address(node.get("status") or {}, preferred_address_types)
    except nodeaddress.NoAddressError as err:
        # Not an API status in kube-apiserver: a plain error, so a 500 with no reason.
        raise ApiError(500, str(err), reason="") from None
    if route.subresource != "portforward" and container is None:
        names = [c.get("name") for c in spec.get("containers") or [] if isinstance(c, dict)]
        if len(names) != 1:
            choices = " ".join(str(n) for n in names)
            raise bad_request(f"a container name must be specified for pod {route.name}, choose one of: [{choices}]")
        container = str(names[0])
    try:
        target = proxy.kubelet_location(route.subresource, route.namespace or "", route.name, container, query)
    except proxy.LocationError as err:
        raise bad_request(str(err)) from None
    return host, port, target
