"""A webhook's `clientConfig.service` resolved to the address to dial, as kube-apiserver's
service resolver does: the Service, its port, then a ready address of its endpoints.

Called by `admission._post` for every webhook that names a Service. Reads the store (the
Endpoints object named like the Service, else the EndpointSlices labelled
`kubernetes.io/service-name`); writes nothing. Tests: tests/devcluster/test_admission_service.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

SERVICES_KEY = "/services"
ENDPOINTS_KEY = "/endpoints"
SLICES_KEY = "discovery.k8s.io/endpointslices"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
DEFAULT_PORT = 443
_ROUTABLE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")


class ResolveError(Exception):
    """The Service cannot be dialled; the text is kube-apiserver's (`no endpoints available ...`)."""


@dataclass(frozen=True)
class Target:
    """Where to connect and whom to expect there."""

    host: str  # the endpoint address dialled
    port: int  # the endpoint port (the Service port's targetPort, as its endpoints carry it)
    server_name: str  # `<name>.<namespace>.svc`: the SNI and the name the certificate must carry
    origin: str  # `https://<name>.<namespace>.svc:<service port>`, as the API server reports it
    path: str  # the request path (and query)


def service_origin(config: Mapping[str, Any]) -> tuple[str, str]:
    """(`https://<name>.<namespace>.svc:<port>`, path) of a well-formed clientConfig.service,
    else two empty strings."""
    try:
        namespace, name, port, path = service_reference(config)
    except ResolveError:
        return "", ""
    return f"https://{name}.{namespace}.svc:{port}", path


def service_reference(config: Mapping[str, Any]) -> tuple[str, str, int, str]:
    """(namespace, name, port, path) of a clientConfig.service; ResolveError when malformed."""
    service = config.get("service")
    if not isinstance(service, Mapping):
        raise ResolveError("clientConfig needs a url or a service")
    namespace, name, port = service.get("namespace"), service.get("name"), service.get("port", DEFAULT_PORT)
    if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
        raise ResolveError("clientConfig.service needs a namespace and a name")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ResolveError(f"clientConfig.service.port must be 1-65535, got {port!r}")
    path = service.get("path") or "/"
    if not isinstance(path, str) or not path.startswith("/"):
        raise ResolveError(f"clientConfig.service.path must start with /, got {path!r}")
    return namespace, name, port, path


def resolve(store: Any, config: Mapping[str, Any]) -> Target:
    """The endpoint to call for `config` (a clientConfig naming a service).

    The endpoint port is the one whose `name` is the Service port's name, as kube-apiserver
    looks it up: the endpoints controller writes each Service port's targetPort (a number, or a
    named container port resolved to its number) under that name, so a test that registers an
    address by hand writes the port it listens on under the Service port's name (`""` for an
    unnamed single port). Raises ResolveError with the real server's wording."""
    namespace, name, port, path = service_reference(config)
    server_name = f"{name}.{namespace}.svc"
    origin = f"https://{server_name}:{port}"
    service = store.get(SERVICES_KEY, namespace, name)
    if service is None:
        raise ResolveError(f'service "{name}" not found')
    spec = service.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    if kind not in _ROUTABLE_TYPES:
        raise ResolveError(f'unsupported service type "{kind}"')
    service_port = next((p for p in spec.get("ports") or [] if isinstance(p, dict) and p.get("port") == port), None)
    if service_port is None:
        raise ResolveError(f'no service port {port} found for service "{name}"')
    port_name = str(service_port.get("name") or "")
    for host, endpoint_port in _ready_endpoints(store, namespace, name, port_name):
        return Target(host=host, port=endpoint_port, server_name=server_name, origin=origin, path=path)
    raise ResolveError(f'no endpoints available for service "{name}"')


def _ready_endpoints(store: Any, namespace: str, name: str, port_name: str) -> Iterator[tuple[str, int]]:
    """(address, port) pairs that serve `port_name`: Endpoints subsets' ready addresses, then
    EndpointSlice endpoints whose `ready` condition is not false."""
    endpoints = store.get(ENDPOINTS_KEY, namespace, name) or {}
    for subset in endpoints.get("subsets") or []:
        number = _port_number(subset.get("ports"), port_name)
        if number is None:
            continue
        for address in subset.get("addresses") or []:
            if isinstance(address, dict) and address.get("ip"):
                yield str(address["ip"]), number
    slices, _ = store.list_objects(SLICES_KEY, namespace)
    for piece in slices:
        labels = (piece.get("metadata") or {}).get("labels") or {}
        if labels.get(SERVICE_NAME_LABEL) != name:
            continue
        number = _port_number(piece.get("ports"), port_name)
        if number is None:
            continue
        for endpoint in piece.get("endpoints") or []:
            if not isinstance(endpoint, dict) or (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or []:
                yield str(address), number


def _port_number(ports: Any, port_name: str) -> int | None:
    for entry in ports or []:
        if isinstance(entry, dict) and str(entry.get("name") or "") == port_name and isinstance(entry.get("port"), int):
            return int(entry["port"])
    return None
