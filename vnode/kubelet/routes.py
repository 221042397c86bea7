"""The kubelet listener's URL map, as a pure function from (method, path) to a `Route`.

Called by the kubelet ASGI app and the SPDY upgrade hook. Paths the kubelet does not
serve (the console's, anything else) become None, which the caller answers with 404:
the kubelet listener serves nothing but these (design I5).
Tests: tests/vnode/kubelet/test_kubelet_params.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import unquote


class Kind(enum.Enum):
    LOGS = "containerLogs"
    EXEC = "exec"
    ATTACH = "attach"
    PORT_FORWARD = "portForward"
    PODS = "pods"
    RUNNING_PODS = "runningpods"
    STATS = "stats/summary"
    METRICS = "metrics/resource"
    HEALTHZ = "healthz"


STREAMING = frozenset({Kind.EXEC, Kind.ATTACH})
_READ_ONLY = frozenset({Kind.LOGS, Kind.PODS, Kind.RUNNING_PODS, Kind.STATS, Kind.METRICS, Kind.HEALTHZ})
MAX_PATH = 4096  # I7: a namespace, a Pod and a container name are each at most 253 characters


@dataclass(frozen=True)
class Route:
    kind: Kind
    namespace: str = ""
    pod: str = ""
    container: str = ""


class MethodNotAllowed(Exception):
    """A known path with a method it does not take (405)."""


def resolve(method: str, raw_path: str) -> Route | None:
    """The route for a request, None for a path the kubelet does not serve.

    Raises MethodNotAllowed for a known path with the wrong method. `raw_path` is the
    percent-encoded path; each segment is decoded after splitting, so an encoded slash
    stays inside its segment.
    """
    if len(raw_path) > MAX_PATH:
        return None
    route = _match([unquote(s) for s in raw_path.split("/")[1:]])
    if route is None:
        return None
    allowed = ("GET", "POST") if route.kind in STREAMING or route.kind is Kind.PORT_FORWARD else ("GET", "HEAD")
    if method.upper() not in allowed:
        raise MethodNotAllowed(f"{method} is not allowed on /{route.kind.value}")
    return route


def _match(segments: list[str]) -> Route | None:
    if not segments or any(s == "" for s in segments[:-1]):
        return None
    head, rest = segments[0], segments[1:]
    if rest and rest[-1] == "" and head in ("runningpods", "stats", "metrics"):
        rest = rest[:-1]  # the kubelet registers these with a trailing slash too
    simple = {("pods",): Kind.PODS, ("runningpods",): Kind.RUNNING_PODS, ("healthz",): Kind.HEALTHZ}
    if not rest and (head,) in simple:
        return Route(simple[(head,)])
    if (head, *rest) == ("stats", "summary"):
        return Route(Kind.STATS)
    if (head, *rest) == ("metrics", "resource"):
        return Route(Kind.METRICS)
    if any(not s for s in rest):
        return None
    if head == Kind.LOGS.value and len(rest) == 3:
        return Route(Kind.LOGS, *rest)
    if head in (Kind.EXEC.value, Kind.ATTACH.value) and len(rest) in (3, 4):
        # The 4-segment form carries the Pod UID before the container: /exec/ns/pod/uid/c.
        namespace, pod, container = rest[0], rest[1], rest[-1]
        return Route(Kind(head), namespace, pod, container)
    if head == Kind.PORT_FORWARD.value and len(rest) in (2, 3):
        return Route(Kind.PORT_FORWARD, rest[0], rest[1])
    return None
