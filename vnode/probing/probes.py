"""One run of one probe, as the kubelet's probers run it: exec, tcpSocket, httpGet.

Called by `vnode.probing.prober`'s worker threads, never the poll loop. Each run honours the probe's
timeout (an exec still running then is closed). exec goes through the provider's
`Executor` (success: exit 0); tcpSocket is one TCP connect; httpGet is one GET (certificates
not verified, redirects followed on the same host, as the kubelet does; 200-399 is success).
The message of a failure is the kubelet's (the command's output, the dial error, the status
code), cut short; it never carries the Pod's env (a probe's own output is the user's).
Tests: tests/vnode/test_probes.py.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from providers import errors
from providers.base import Executor, InstanceId
from vnode.model.probespec import Action, ExecAction, HttpAction, Probe, TcpAction

MAX_OUTPUT = 10 * 1024  # the kubelet reads this much of a probe's output or body
MAX_MESSAGE = 1024  # what an Event's message keeps of it
MAX_REDIRECTS = 10
USER_AGENT = "kube-probe/nebula"


@dataclass(frozen=True)
class Outcome:
    """What one run found. `errored`: the probe could not be run at all (no exec, no port):
    the kubelet counts it as a failure but says "probe errored"."""

    ok: bool
    message: str = ""
    errored: bool = False


@dataclass(frozen=True)
class Target:
    """Where a probe runs: the instance (for exec) and its address (for TCP and HTTP)."""

    instance_id: InstanceId
    host: str = ""


def run_probe(probe: Probe, target: Target, *, executor: Executor | None, watch: Watch | None = None) -> Outcome:
    """Run `probe` once against `target`; never raises for what the probe finds."""
    action: Action = probe.action
    if isinstance(action, ExecAction):
        if executor is None:
            return Outcome(False, "the provider cannot run a command in the instance (no exec)", errored=True)
        command = action.command
        return run_exec(executor, target.instance_id, probe.container, command, timeout=probe.timeout, watch=watch)
    if action.port is None:
        return Outcome(False, f"port {action.port_name} not found", errored=True)
    host = action.host or target.host
    if not host:
        return Outcome(False, "the instance has no address to probe", errored=True)
    if isinstance(action, TcpAction):
        return run_tcp(host, action.port, timeout=probe.timeout)
    return run_http(action, host, timeout=probe.timeout)


Watch = Callable[[float, Callable[[], None]], Callable[[], None]]  # (deadline, expire) -> cancel


def run_exec(
    executor: Executor,
    instance_id: InstanceId,
    container: str,
    command: tuple[str, ...],
    *,
    timeout: float,
    watch: Watch | None = None,
) -> Outcome:
    """The command in the container; success is exit 0 within `timeout`. `watch` (the
    prober's `Watchdog.watch`) closes the process at its deadline, so a command whose
    output never ends (a child kept it open) cannot hold the worker; None: a timer of its own.
    A `Process` buffers its output (each provider's does), so waiting before reading
    never stalls the command."""
    try:
        process = executor.exec(instance_id, command, tty=False, stdin=False, container=container)
    except errors.ProviderError as exc:
        return Outcome(False, f"cannot run {command[0]!r}: {exc}", errored=True)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        process.close()

    cancel = (watch or _timer)(time.monotonic() + timeout, expire)
    try:
        code = process.wait(timeout=timeout)
        if code is None or expired.is_set():
            return Outcome(False, f"command {' '.join(command)!r} timed out")
        text = _short((_read(process.read_stdout) + _read(process.read_stderr)).decode("utf-8", "replace"))
        if code == 0:
            return Outcome(True, text)
        return Outcome(False, text or f"command {' '.join(command)!r} exited with code {code}")
    except (OSError, ValueError, errors.ProviderError) as exc:
        return Outcome(False, f"lost the command {command[0]!r}: {exc}", errored=True)
    finally:
        cancel()
        process.close()


def _read(read: Callable[[], bytes]) -> bytes:
    """A stream to its end (or to its close at the deadline), the first MAX_OUTPUT bytes kept."""
    kept = bytearray()
    while chunk := read():
        if len(kept) < MAX_OUTPUT:
            kept.extend(chunk[: MAX_OUTPUT - len(kept)])
    return bytes(kept)


def _timer(deadline: float, expire: Callable[[], None]) -> Callable[[], None]:
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
    timer.daemon = True
    timer.start()
    return timer.cancel


class Watchdog:
    """One thread that closes, at their deadlines, what every probe worker started: a
    heap of deadlines instead of a timer thread per exec. Real time only."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._live: set[int] = set()
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="probe watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop; True once its thread has ended."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def watch(self, deadline: float, expire: Callable[[], None]) -> Callable[[], None]:
        """Call `expire` at `deadline` (monotonic) unless the returned cancel is called first."""
        with self._cond:
            token = next(self._seq)
            self._live.add(token)
            heapq.heappush(self._heap, (deadline, token, expire))
            if self._heap[0][1] == token:  # the earliest now: the thread must wake sooner
                self._cond.notify()
        return lambda: self._cancel(token)

    def _cancel(self, token: int) -> None:
        with self._cond:
            self._live.discard(token)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                _, token, expire = heapq.heappop(self._heap)
                due = token in self._live
                self._live.discard(token)
            if due:
                expire()


def run_tcp(host: str, port: int, *, timeout: float) -> Outcome:
    """One TCP connect to host:port within `timeout`."""
    where = _hostport(host, port)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return Outcome(True)
    except OSError as exc:
        return Outcome(False, f"dial tcp {where}: {_dial_error(exc)}")


def run_http(action: HttpAction, host: str, *, timeout: float) -> Outcome:
    """One GET (and the same-host redirects it leads to) within `timeout` in all."""
    scheme = action.scheme.lower()
    assert action.port is not None
    path = action.path if action.path.startswith("/") else f"/{action.path}"
    url = f"{scheme}://{_hostport(host, action.port)}{path}"
    merged = {"user-agent": ("User-Agent", USER_AGENT), "accept": ("Accept", "*/*")}
    merged.update({name.lower(): (name, value) for name, value in action.headers})  # the Pod's win
    headers = dict(merged.values())
    deadline = time.monotonic() + timeout
    for _ in range(MAX_REDIRECTS + 1):
        try:
            status, location = _get(url, headers, deadline=deadline)
        except (OSError, http.client.HTTPException) as exc:
            return Outcome(False, f'Get "{url}": {_dial_error(exc)}')
        if 300 <= status < 400 and location:
            following = urljoin(url, location)
            if urlsplit(following).hostname != urlsplit(url).hostname:
                return Outcome(True, f"Probe terminated redirects, Response: {status}")
            url = following
            continue
        if 200 <= status < 400:
            return Outcome(True)
        return Outcome(False, f"HTTP probe failed with statuscode: {status}")
    return Outcome(False, f'Get "{url}": stopped after {MAX_REDIRECTS} redirects')


def _get(url: str, headers: dict[str, str], *, deadline: float) -> tuple[int, str]:
    parts = urlsplit(url)
    remaining = max(0.001, deadline - time.monotonic())
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the kubelet's probes do not verify certificates
        connection = http.client.HTTPSConnection(str(parts.hostname), parts.port, timeout=remaining, context=context)
    else:
        connection = http.client.HTTPConnection(str(parts.hostname), parts.port, timeout=remaining)
    try:
        own_host = any(name.lower() == "host" for name in headers)  # the Pod's Host header names the vhost
        connection.putrequest("GET", parts.path + (f"?{parts.query}" if parts.query else ""), skip_host=own_host)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        if connection.sock is not None:
            connection.sock.settimeout(max(0.001, deadline - time.monotonic()))
        response = connection.getresponse()
        response.read(MAX_OUTPUT)
        return response.status, response.getheader("Location") or ""
    finally:
        connection.close()


def host_of(endpoint: str) -> str:
    """The host an endpoint names: `10.0.0.7`, `10.0.0.7:22`, `[::1]:22`, `::1`, `ec2-...com`,
    `https://box:8443/` all give their host alone (a port there is not the probe's)."""
    if "://" in endpoint:
        return urlsplit(endpoint).hostname or ""
    if endpoint.startswith("["):
        return endpoint[1:].split("]", 1)[0]
    return endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 else endpoint


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _dial_error(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "i/o timeout"
    if isinstance(exc, socket.gaierror):
        return f"lookup failed: {exc.strerror or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"connect: {exc.strerror.lower()}"
    return _short(str(exc) or type(exc).__name__)


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
