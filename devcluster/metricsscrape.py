"""The scraping half of the embedded metrics-server: read every node's kubelet
`/metrics/resource`, keep the last two points of each node and container, and turn them
into CPU rates and memory over a window, as metrics-server's scraper and storage do.

`MetricsScraper` runs on a thread of the DevCluster (every `interval` seconds) and dials a
kubelet exactly as the pod subresource proxy does (`nodeaddress` picks the address,
`proxy.forward` dials with the proxy's TLS context). `metricsapi` reads `MetricsStore`.
Tests: tests/devcluster/test_metrics_api.py.
"""

from __future__ import annotations

import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from devcluster import nodeaddress, proxy
from devcluster.store import Store

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 15.0  # metrics-server's --metric-resolution
MAX_SCRAPE_BYTES = 16 * 1024 * 1024  # a kubelet's answer beyond this is refused, not buffered
_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Point:
    """One cumulative CPU reading (core-seconds) and a memory working set, at `time` (s)."""

    cpu_seconds: float
    memory_bytes: float
    time: float
    start_time: float = 0.0  # a container's start: a new start is a new counter


@dataclass(frozen=True)
class Usage:
    """A rate over a window: CPU in nanocores, memory in bytes, at `timestamp` (seconds)."""

    nano_cores: int
    memory_bytes: int
    timestamp: float
    window: float


@dataclass(frozen=True)
class Scrape:
    """What one kubelet endpoint answered: its node point and its containers' points."""

    node: Point | None
    containers: Mapping[tuple[str, str, str], Point]  # (namespace, pod, container)


def parse_resource_metrics(text: str) -> Scrape:
    """The points of a `/metrics/resource` exposition (series without a timestamp, or of an
    unknown name, are ignored). Raises ValueError for a malformed line."""
    values: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float | None]] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _SERIES.match(line)
        if match is None:
            raise ValueError(f"malformed metrics line: {line[:200]!r}")
        name, labels, value, stamp = match.groups()
        pairs = tuple(sorted((k, _unescape(v)) for k, v in _LABEL.findall(labels or "")))
        values[(name, pairs)] = (float(value), int(stamp) / 1000 if stamp else None)
    node = _point(values, "node", ())
    containers: dict[tuple[str, str, str], Point] = {}
    for name, pairs in values:
        if name != "container_cpu_usage_seconds_total":
            continue
        labels = dict(pairs)
        key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
        point = _point(values, "container", pairs)
        if point is not None and all(key):
            containers[key] = point
    return Scrape(node, containers)


def _point(values: Mapping[tuple[str, Any], tuple[float, float | None]], kind: str, pairs: Any) -> Point | None:
    cpu = values.get((f"{kind}_cpu_usage_seconds_total", pairs))
    memory = values.get((f"{kind}_memory_working_set_bytes", pairs))
    if cpu is None or memory is None or cpu[1] is None:
        return None
    start = values.get(("container_start_time_seconds", pairs))
    return Point(cpu[0], memory[0], cpu[1], start[0] if start else 0.0)


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


class MetricsStore:
    """The last two points per node and container (metrics-server's storage): a rate needs
    two readings of the same counter, later in time, with the same start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[Point | None, Point]] = {}
        self._containers: dict[tuple[str, str, str], tuple[Point | None, Point]] = {}
        self._shared: dict[str, list[tuple[str, str, str]]] = {}

    def store(
        self,
        nodes: Mapping[str, Point],
        containers: Mapping[tuple[str, str, str], Point],
        shared: Mapping[str, list[tuple[str, str, str]]] | None = None,
    ) -> None:
        """The points of one round; `shared`: nodes behind an endpoint that serves several,
        with the containers of each one's Pods (their usage is the node's)."""
        with self._lock:
            self._nodes = _advance(self._nodes, nodes)
            self._containers = _advance(self._containers, containers)
            self._shared = dict(shared or {})

    def node(self, name: str) -> Usage | None:
        with self._lock:
            pair = self._nodes.get(name)
            mine = [self._containers[k] for k in self._shared.get(name, []) if k in self._containers]
            shared = name in self._shared
        if not shared:
            return _usage(pair) if pair is not None else None
        rates = [rate for each in mine if (rate := _usage(each)) is not None]
        if not rates:
            return None
        return Usage(
            sum(r.nano_cores for r in rates),
            sum(r.memory_bytes for r in rates),
            max(r.timestamp for r in rates),
            max(r.window for r in rates),
        )

    def pod(self, namespace: str, name: str) -> dict[str, Usage] | None:
        """Each container's usage; None unless every container of the Pod has a rate."""
        with self._lock:
            mine = {k[2]: pair for k, pair in self._containers.items() if k[0] == namespace and k[1] == name}
        rates = {container: _usage(pair) for container, pair in mine.items()}
        if not rates or any(rate is None for rate in rates.values()):
            return None
        return {container: rate for container, rate in rates.items() if rate is not None}


K = TypeVar("K")


def _advance(
    old: Mapping[K, tuple[Point | None, Point]], new: Mapping[K, Point]
) -> dict[K, tuple[Point | None, Point]]:
    """The new last points, each with the previous one it can be rated against."""
    result: dict[K, tuple[Point | None, Point]] = {}
    for key, point in new.items():
        previous: Point | None = None
        if key in old:
            before, last = old[key]
            if last.start_time == point.start_time and last.time < point.time:
                previous = last
            elif before is not None and before.start_time == point.start_time and before.time < point.time:
                previous = before  # the kubelet answered from the same sample: keep the older point
        result[key] = (previous, point)
    return result


def _usage(pair: tuple[Point | None, Point]) -> Usage | None:
    previous, last = pair
    if previous is None or last.cpu_seconds < previous.cpu_seconds:
        return None
    window = last.time - previous.time
    rate = (last.cpu_seconds - previous.cpu_seconds) / window
    return Usage(int(rate * 1e9), int(last.memory_bytes), last.time, window)


class MetricsScraper:
    """Scrapes every node's kubelet each `interval` seconds into a MetricsStore."""

    def __init__(
        self,
        store: Store,
        *,
        preferred_address_types: Sequence[str],
        interval: float = DEFAULT_INTERVAL,
        timeout: float = 10.0,
        fetch: Callable[[str, int, float], str] | None = None,
    ) -> None:
        self.metrics = MetricsStore()
        self._store = store
        self._preferred = tuple(preferred_address_types)
        self._interval = interval
        self._timeout = min(timeout, interval)
        self._fetch = fetch or self._fetch_with_context
        self.tls_context: ssl.SSLContext | None = None  # the cluster's kubelet client context, set at its start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _fetch_with_context(self, host: str, port: int, timeout: float) -> str:
        return fetch_resource_metrics(host, port, timeout, self.tls_context)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="devcluster-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop scraping. A scrape in flight (a dial to an address that never answers waits
        out its timeout) is not waited for beyond a second: the thread is a daemon that ends
        after it, touching nothing but this scraper's own store."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.scrape_once()

    def scrape_once(self) -> None:
        """One round: each distinct kubelet endpoint once, every node behind it."""
        nodes, _ = self._store.list_objects("/nodes")
        endpoints: dict[tuple[str, int], list[str]] = {}
        for node in nodes:
            try:
                address = nodeaddress.kubelet_address(node.get("status") or {}, self._preferred)
            except nodeaddress.NoAddressError:
                continue
            endpoints.setdefault(address, []).append(str(node["metadata"]["name"]))
        node_points: dict[str, Point] = {}
        container_points: dict[tuple[str, str, str], Point] = {}
        shared: dict[str, list[tuple[str, str, str]]] = {}
        for (host, port), names in endpoints.items():
            try:
                scrape = parse_resource_metrics(self._fetch(host, port, self._timeout))
            except (proxy.ProxyError, OSError, ValueError) as exc:
                log.info("scraping the kubelet at %s:%s failed: %s", host, port, exc)
                continue
            container_points.update(scrape.containers)
            if len(names) > 1:
                shared.update(_pods_by_node(names, scrape, self._store))
            elif scrape.node is not None:
                node_points[names[0]] = scrape.node
        self.metrics.store(node_points, container_points, shared)


def _pods_by_node(names: Iterable[str], scrape: Scrape, store: Store) -> dict[str, list[tuple[str, str, str]]]:
    """Where several nodes share one endpoint (Nebula's virtual nodes behind one listener),
    the containers of each node's own Pods: the node's usage is theirs."""
    pods, _ = store.list_objects("/pods")
    on_node = {
        (str(p["metadata"].get("namespace")), str(p["metadata"].get("name"))): (p.get("spec") or {}).get("nodeName")
        for p in pods
    }
    return {name: [key for key in scrape.containers if on_node.get(key[:2]) == name] for name in names}


class _Collected:
    """The client side of `proxy.forward`: what the kubelet answered, bounded."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.overflow = False

    def write(self, data: bytes, /) -> int:
        if len(self.data) + len(data) > MAX_SCRAPE_BYTES:
            self.overflow = True  # the proxy then ends the relay; the partial answer is refused below
            raise OSError(f"the kubelet's answer is over {MAX_SCRAPE_BYTES} bytes")
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass

    def read1(self, size: int = -1, /) -> bytes:
        return b""


def fetch_resource_metrics(host: str, port: int, timeout: float, tls_context: ssl.SSLContext | None = None) -> str:
    """GET /metrics/resource from the kubelet through the proxy's dial (its TLS context and
    credentials), as kube-apiserver's nodes/proxy would reach it. ValueError for a non-200."""
    collected = _Collected()
    with socket.socket() as unconnected:  # no client socket: nothing to half-close
        client = proxy.ClientConnection(rfile=collected, wfile=collected, sock=unconnected)
        proxy.forward(
            client, host=host, port=port, method="GET", target="/metrics/resource",
            headers=[("Accept", "text/plain"), ("User-Agent", "devcluster-metrics-server")], body=b"",
            timeout=timeout, tls_context=tls_context,
        )  # fmt: skip
    if collected.overflow:
        raise ValueError(f"the kubelet's answer is over {MAX_SCRAPE_BYTES} bytes")
    head, _, body = bytes(collected.data).partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head.count(b" ") >= 1 else b""
    if status != b"200":
        raise ValueError(f"the kubelet answered {status.decode('latin-1') or 'nothing'}")
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        body = _dechunk(body)
    else:
        length = re.search(rb"content-length: *(\d+)", lower)
        if length is None or len(body) != int(length.group(1)):
            raise ValueError("the kubelet's answer ended early")
    return body.decode("utf-8", "replace")


def _dechunk(body: bytes) -> bytes:
    """The chunked body's data; ValueError when it ends before its last chunk."""
    out = bytearray()
    while body:
        size_text, _, rest = body.partition(b"\r\n")
        size = int(size_text.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        if len(rest) < size + 2:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    raise ValueError("the kubelet's answer ended early")
