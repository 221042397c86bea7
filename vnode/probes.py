"""One run of one probe, as the kubelet's probers run it: exec, tcpSocket, httpGet.

Called by `vnode.prober`'s worker threads, never the poll loop. Each run honours the probe's
timeout (an exec still running then is closed). exec goes through the provider's
`Executor` (success: exit 0); tcpSocket is one TCP connect; httpGet is one GET (certificates
not verified, redirects followed on the same host, as the kubelet does; 200-399 is success).
The message of a failure is the kubelet's (the command's output, the dial error, the status
code), cut short; it never carries the Pod's env (a probe's own output is the user's).
Tests: tests/vnode/test_probes.py.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from providers import errors
from providers.base import Executor, InstanceId, Process
from vnode.probespec import Action, ExecAction, HttpAction, Probe, TcpAction

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


def run_probe(probe: Probe, target: Target, *, executor: Executor | None) -> Outcome:
    """Run `probe` once against `target`; never raises for what the probe finds."""
    action: Action = probe.action
    if isinstance(action, ExecAction):
        if executor is None:
            return Outcome(False, "the provider cannot run a command in the instance (no exec)", errored=True)
        return run_exec(executor, target.instance_id, probe.container, action.command, timeout=probe.timeout)
    if action.port is None:
        return Outcome(False, f"port {action.port_name} not found", errored=True)
    host = action.host or target.host
    if not host:
        return Outcome(False, "the instance has no address to probe", errored=True)
    if isinstance(action, TcpAction):
        return run_tcp(host, action.port, timeout=probe.timeout)
    return run_http(action, host, timeout=probe.timeout)


def run_exec(
    executor: Executor, instance_id: InstanceId, container: str, command: tuple[str, ...], *, timeout: float
) -> Outcome:
    """The command in the container; success is exit 0 within `timeout`."""
    try:
        process = executor.exec(instance_id, command, tty=False, stdin=False, container=container)
    except errors.ProviderError as exc:
        return Outcome(False, f"cannot run {command[0]!r}: {exc}", errored=True)
    try:
        output = _Drain(process)
        code = process.wait(timeout=timeout)
        if code is None:
            return Outcome(False, f"command {' '.join(command)!r} timed out")
        text = output.text(wait=min(timeout, 1.0))
        if code == 0:
            return Outcome(True, text)
        return Outcome(False, text or f"command {' '.join(command)!r} exited with code {code}")
    finally:
        process.close()


class _Drain:
    """Reads a process's stdout and stderr on two short-lived threads (a command that
    writes more than a pipe holds must not stall on the one nobody reads), keeping the
    first MAX_OUTPUT bytes."""

    def __init__(self, process: Process) -> None:
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._pump, args=(read,), name="probe output", daemon=True)
            for read in (process.read_stdout, process.read_stderr)
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, read: Callable[[], bytes]) -> None:
        kept = 0
        try:
            while chunk := read():
                with self._lock:
                    if kept < MAX_OUTPUT:
                        self._chunks.append(chunk[: MAX_OUTPUT - kept])
                        kept += len(chunk)
        except (OSError, ValueError, errors.ProviderError):
            return  # the process was closed under us: what was read is kept

    def text(self, *, wait: float) -> str:
        """The output read so far, once both streams ended or `wait` passed."""
        deadline = time.monotonic() + wait
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            data = b"".join(self._chunks)
        return _short(data.decode("utf-8", "replace"))


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
    url = (
        f"{scheme}://{_hostport(host, action.port)}{action.path if action.path.startswith('/') else '/' + action.path}"
    )
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
        host_header = next((v for k, v in headers.items() if k.lower() == "host"), None)
        connection.putrequest(
            "GET", parts.path + (f"?{parts.query}" if parts.query else ""), skip_host=bool(host_header)
        )
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
