"""The probes a Pod declares, read once: startup, readiness and liveness of each container.

Read by `vnode.probing.prober` (and, for a refusal at create, by whoever wants the field that is
wrong). Pure: no I/O. Defaults are the API server's (`SetDefaults_Probe`: a 0 is the
default); the checks are its validation's, so a Pod the API server would refuse raises
`InvalidProbe` naming the field. A named port is resolved against the container's `ports`;
one that is not there is kept unresolved: the kubelet accepts such a Pod and fails the
probe at each run ("port http not found"), and so does the prober.
Tests: tests/vnode/test_probespec.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

STARTUP = "startup"
READINESS = "readiness"
LIVENESS = "liveness"
KINDS = (STARTUP, READINESS, LIVENESS)  # the order a container's probes are listed in

DEFAULT_PERIOD = 10
DEFAULT_TIMEOUT = 1
DEFAULT_SUCCESS = 1
DEFAULT_FAILURE = 3
DEFAULT_GRACE = 30  # the Pod's terminationGracePeriodSeconds when it names none
MINIMUM_GRACE = 2  # the kubelet never kills with less (kuberuntime's minimumGracePeriodInSeconds)
_ACTIONS = ("exec", "httpGet", "tcpSocket", "grpc")


class InvalidProbe(ValueError):
    """A probe the API server would refuse; `field` is its path (`spec.containers[0].livenessProbe.periodSeconds`)."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


@dataclass(frozen=True)
class ExecAction:
    command: tuple[str, ...]


@dataclass(frozen=True)
class TcpAction:
    port: int | None  # None: a named port the container does not declare (`port_name`)
    host: str = ""  # empty: the instance's address
    port_name: str = ""


@dataclass(frozen=True)
class HttpAction:
    port: int | None  # None: a named port the container does not declare (`port_name`)
    path: str = "/"
    host: str = ""  # empty: the instance's address
    scheme: str = "HTTP"  # HTTP or HTTPS
    headers: tuple[tuple[str, str], ...] = ()
    port_name: str = ""


Action = ExecAction | TcpAction | HttpAction


@dataclass(frozen=True)
class Probe:
    """One probe of one container, its values defaulted; times in seconds."""

    kind: str  # STARTUP, READINESS or LIVENESS
    container: str
    action: Action
    initial_delay: float = 0.0
    period: float = DEFAULT_PERIOD
    timeout: float = DEFAULT_TIMEOUT
    success_threshold: int = DEFAULT_SUCCESS
    failure_threshold: int = DEFAULT_FAILURE
    grace: float = DEFAULT_GRACE  # the kill's grace after a failed liveness or startup probe

    @property
    def title(self) -> str:
        """`Readiness`: the word the kubelet's Events begin with."""
        return self.kind.capitalize()


def probes_of(pod: Mapping[str, Any]) -> tuple[Probe, ...]:
    """Every probe of the Pod's app containers and native sidecars, in container order and
    startup, readiness, liveness within one. Raises InvalidProbe."""
    spec = pod.get("spec") or {}
    pod_grace = _pod_grace(spec)
    found: list[Probe] = []
    groups = (("containers", False), ("initContainers", True))
    for group, sidecars_only in groups:
        for index, container in enumerate(spec.get(group) or []):
            if sidecars_only and container.get("restartPolicy") != "Always":
                continue  # an init container that runs to completion is never probed
            for kind in KINDS:
                body = container.get(f"{kind}Probe")
                if body is not None:
                    where = f"spec.{group}[{index}].{kind}Probe"
                    found.append(_probe(body, kind=kind, container=container, pod_grace=pod_grace, where=where))
    return tuple(found)


def _pod_grace(spec: Mapping[str, Any]) -> float:
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is None:
        return DEFAULT_GRACE
    return float(_integer(grace, "spec.terminationGracePeriodSeconds", default=DEFAULT_GRACE, zero_is_default=False))


def _probe(body: Any, *, kind: str, container: Mapping[str, Any], pod_grace: float, where: str) -> Probe:
    if not isinstance(body, Mapping):
        raise InvalidProbe(where, "must be an object")
    success = _integer(body.get("successThreshold"), f"{where}.successThreshold", default=DEFAULT_SUCCESS)
    if kind != READINESS and success != 1:
        raise InvalidProbe(f"{where}.successThreshold", "must be 1")
    own_grace = body.get("terminationGracePeriodSeconds")
    if own_grace is not None and kind == READINESS:
        raise InvalidProbe(f"{where}.terminationGracePeriodSeconds", "must not be set for readinessProbes")
    grace = pod_grace
    if own_grace is not None:
        grace = _integer(own_grace, f"{where}.terminationGracePeriodSeconds", default=0, zero_is_default=False)
        if grace <= 0:
            raise InvalidProbe(f"{where}.terminationGracePeriodSeconds", "must be greater than 0")
    return Probe(
        kind=kind,
        container=str(container.get("name", "")),
        action=_action(body, container=container, where=where),
        initial_delay=_integer(body.get("initialDelaySeconds"), f"{where}.initialDelaySeconds", default=0),
        period=_integer(body.get("periodSeconds"), f"{where}.periodSeconds", default=DEFAULT_PERIOD),
        timeout=_integer(body.get("timeoutSeconds"), f"{where}.timeoutSeconds", default=DEFAULT_TIMEOUT),
        success_threshold=success,
        failure_threshold=_integer(body.get("failureThreshold"), f"{where}.failureThreshold", default=DEFAULT_FAILURE),
        grace=float(max(grace, MINIMUM_GRACE)),
    )


def _integer(value: Any, field: str, *, default: int, zero_is_default: bool = True) -> int:
    """A non-negative whole number; absent (or 0, where the API server defaults it) is `default`."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidProbe(field, f"must be a whole number, not {value!r}")
    if value < 0:
        raise InvalidProbe(field, "must be greater than or equal to 0")
    return default if value == 0 and zero_is_default else value


def handler_action(body: Mapping[str, Any], *, container: Mapping[str, Any], where: str) -> Action:
    """The action of a probe or lifecycle handler `body` (exec, httpGet or tcpSocket), its
    fields checked as the API server checks them; InvalidProbe names the field otherwise."""
    return _action(body, container=container, where=where)


def _action(body: Mapping[str, Any], *, container: Mapping[str, Any], where: str) -> Action:
    given = [name for name in _ACTIONS if body.get(name) is not None]
    if not given:
        raise InvalidProbe(where, "must specify a handler type (exec, httpGet or tcpSocket)")
    if len(given) > 1:
        raise InvalidProbe(f"{where}.{given[1]}", "may not specify more than 1 handler type")
    name = given[0]
    action, field = body[name], f"{where}.{name}"
    if not isinstance(action, Mapping):
        raise InvalidProbe(field, "must be an object")
    if name == "grpc":
        raise InvalidProbe(field, "grpc probes are not served")
    if name == "exec":
        command = action.get("command")
        if not isinstance(command, Sequence) or isinstance(command, str) or not command:
            raise InvalidProbe(f"{field}.command", "must be a non-empty list of strings")
        return ExecAction(tuple(str(word) for word in command))
    port, port_name = _port(action.get("port"), container=container, field=f"{field}.port")
    host = _text(action.get("host"), f"{field}.host")
    if name == "tcpSocket":
        return TcpAction(port=port, host=host, port_name=port_name)
    scheme = _text(action.get("scheme"), f"{field}.scheme") or "HTTP"
    if scheme not in ("HTTP", "HTTPS"):
        raise InvalidProbe(f"{field}.scheme", f'supported values: "HTTP", "HTTPS", not {scheme!r}')
    path = _text(action.get("path"), f"{field}.path") or "/"
    headers = tuple(_header(h, f"{field}.httpHeaders[{i}]") for i, h in enumerate(action.get("httpHeaders") or []))
    return HttpAction(port=port, path=path, host=host, scheme=scheme, headers=headers, port_name=port_name)


def _port(value: Any, *, container: Mapping[str, Any], field: str) -> tuple[int | None, str]:
    """The port number, and the name it was given by (a name the container does not
    declare gives no number: the probe fails when it runs, as the kubelet's does)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= 65535:
            raise InvalidProbe(field, "must be between 1 and 65535, inclusive")
        return value, ""
    if isinstance(value, str) and value:
        if not any(c.isalpha() for c in value):  # IANA_SVC_NAME: "8080" as a string is no name
            raise InvalidProbe(field, "a port name must contain at least one letter")
        for declared in container.get("ports") or []:
            if declared.get("name") == value and isinstance(declared.get("containerPort"), int):
                return int(declared["containerPort"]), value
        return None, value
    raise InvalidProbe(field, "must be a port number or the name of one of the container's ports")


def _text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidProbe(field, f"must be a string, not {value!r}")
    return value


def _header(header: Any, field: str) -> tuple[str, str]:
    if not isinstance(header, Mapping) or not isinstance(header.get("name"), str) or not header["name"]:
        raise InvalidProbe(f"{field}.name", "must be a non-empty string")
    return header["name"], _text(header.get("value"), f"{field}.value")
