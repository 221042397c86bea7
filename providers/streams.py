"""The seam's optional streaming and control protocols: logs, exec, attach, port-forward,
restart, stop.

Each is runtime-checkable and detected once at wiring time (design §4); a provider without
one answers NotFound or NotSupported at the kubelet edge, never a stub. `container` names
the Pod's container the call is for; empty means the Pod's only (first app) container, so
a provider that runs one container may ignore it. `providers.base` re-exports every name;
this module imports only `providers.ids` of the seam (never `providers.base`).
Tests: tests/providers/test_contract.py, tests/providers/local/test_local_forward.py.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from providers.ids import InstanceId


@dataclass(frozen=True)
class LogOptions:
    """The kubelet's containerLogs parameters, already validated."""

    follow: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    timestamps: bool = False
    since: datetime | None = None
    previous: bool = False
    container: str = ""  # the Pod's container (empty: the first app container)


class LogStream(Protocol):
    """A byte stream of an instance's console output."""

    def read(self, max_bytes: int = 65536) -> bytes:
        """Block until data is there; b"" means the end (backlog drained, or exited)."""
        ...

    def close(self) -> None:
        """Stop following; safe from any thread; a blocked read returns b""."""
        ...


@runtime_checkable
class PolledLogStream(LogStream, Protocol):
    """A `LogStream` that can also be asked without waiting, so the kubelet can follow many
    of them from a fixed pool instead of a thread each (I7). Optional: a stream without it
    is read by a thread of its own, under the process-wide cap on followers."""

    def read_nowait(self, max_bytes: int = 65536) -> bytes | None:
        """What `read` would return if it returned at once: bytes, b"" at the end, or None
        when nothing has come yet (ask again later). Never waits, beyond a local file read."""
        ...


@runtime_checkable
class LogStreamer(Protocol):
    def logs(self, instance_id: InstanceId, options: LogOptions) -> LogStream:
        """The output of `options.container` (empty: the first app container), stdout and
        stderr merged, from the first byte (subject to options). With `follow`, the stream
        ends when that container's run exits. Raises NotFound (also for a container the
        instance does not run, or one that has not started), NotSupported (for an option it
        cannot honour), Unavailable."""
        ...


class Process(Protocol):
    """A command running inside an instance."""

    def write_stdin(self, data: bytes) -> None: ...

    def close_stdin(self) -> None:
        """EOF on the command's stdin."""
        ...

    def read_stdout(self, max_bytes: int = 65536) -> bytes:
        """Block for output; b"" at EOF. With a TTY, stderr arrives here too."""
        ...

    def read_stderr(self, max_bytes: int = 65536) -> bytes:
        """Block for output; b"" at EOF (at once with a TTY)."""
        ...

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal size (a no-op without a TTY)."""
        ...

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None if still running after `timeout` seconds."""
        ...

    def close(self) -> None:
        """Kill the command if it still runs and free everything. Idempotent."""
        ...


@runtime_checkable
class Executor(Protocol):
    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Process:
        """Start `command` in the instance, as `container` sees it (its working directory,
        env and mounted volumes). Raises NotFound (also for a container that is not
        running), NotSupported, Unavailable."""
        ...


@runtime_checkable
class Restarter(Protocol):
    def restart(self, instance_id: InstanceId, container: str = "") -> None:
        """Run `container` (empty: the first app container, the whole workload of a
        one-container Pod) again from its start in the same instance, after it ended. The
        run that ended keeps its output for `LogOptions(previous=True)`; `Instance.runs` (and that container's
        `ContainerFacts.runs`) grows by one before this returns, so the next `get`/`list`
        shows the new run. A failed init container that runs again lets the ones after it
        follow. Raises NotFound (gone, or no such container), NotSupported, Unavailable;
        InvalidRequest if it has not ended."""
        ...


@runtime_checkable
class ContainerStopper(Protocol):
    def stop_container(self, instance_id: InstanceId, container: str, *, grace: float) -> None:
        """Stop one running container as a kubelet kills it (a graceful delete, a deadline,
        a failed liveness probe): SIGTERM to its processes (its process group, or PID 1 and
        what it started), then SIGKILL to whatever still runs `grace` seconds later;
        `grace <= 0` sends SIGKILL at once. Every provider implements it.

        Returns once asked: it never waits the grace out (the SIGKILL timer runs on the
        provider's side). Afterwards the container shows TERMINATED in `get`/`list` (its
        `ContainerFacts`, or the state SUCCEEDED/FAILED of a one-container instance) with
        the exit the kernel reports: the workload's own code when it exited by itself (a
        SIGTERM trap that finishes its work and exits 143 gives 143; exit 0 gives 0), 143
        when SIGTERM killed it, 137 when SIGKILL did; `exit_reason` "Completed" for 0, else
        "Error". It runs again only if the vnode calls `restart` for it.

        Idempotent: a second call with a SHORTER grace shortens the remaining wait (a force
        delete after a graceful one); a longer one never lengthens it. A container that is
        not running is success. `container == ""` is the first app container (the whole
        workload of a one-container instance). `terminate` afterwards adds no grace of its
        own for what already ended. Raises NotFound (gone, or no such container),
        Unavailable."""
        ...


@runtime_checkable
class Attacher(Protocol):
    def attach(self, instance_id: InstanceId, *, stdin: bool, tty: bool, container: str = "") -> Process:
        """Connect to `container`'s own process (`kubectl attach`), not to a new command.

        The returned `Process` reads that container's console from now on (stdout and stderr
        merged, no backlog); its output ends when it exits. With `stdin`, bytes
        written go to its stdin if it was started with one (the Pod's
        container has `stdin: true`); otherwise they are dropped. `close_stdin` and `close`
        end this attachment only: the workload keeps running and its stdin stays open for
        the next attach. `wait` gives the exit code once it has exited, else
        None; `resize` is a no-op unless the provider gave it a terminal.
        Raises NotFound (no such instance or container, or not running), NotSupported, Unavailable.
        """
        ...


class PortConnection(Protocol):
    """One TCP connection to a port inside an instance, as a duplex byte stream.

    Every method is safe from any thread: one thread may block in `read` while another
    writes or closes."""

    def read(self, max_bytes: int = 65536) -> bytes:
        """Block for bytes from the instance's side; b"" once it has closed (or after `close`)."""
        ...

    def write(self, data: bytes) -> None:
        """Send all of `data`; raises OSError once the instance's side is gone."""
        ...

    def close_write(self) -> None:
        """Half-close: the instance's side reads EOF; reading goes on. Idempotent."""
        ...

    def close(self) -> None:
        """Close both directions and free everything; a blocked `read` returns b"". Idempotent."""
        ...


@runtime_checkable
class DetachablePortConnection(PortConnection, Protocol):
    """A `PortConnection` that can hand over a connected stream socket, so the kubelet pumps
    it on its event loop instead of two threads (I7). Optional: a connection without it is
    pumped by threads, under a smaller process-wide cap."""

    def detach(self) -> socket.socket:
        """The connection as a connected stream socket: the TCP socket itself, or one end of
        a socket pair whose other end the provider pumps on its own event loop (never a
        thread per connection). From then on the caller owns the socket (reads, writes,
        shuts down, closes it) and calls none of this object's other methods. Called at most
        once, before any read or write. The far side sees the caller's shutdown(SHUT_WR) as
        `close_write` and its close as `close`."""
        ...


@runtime_checkable
class PortForwarder(Protocol):
    def port_forward(self, instance_id: InstanceId, port: int) -> PortConnection:
        """Open one TCP connection to `port` inside the instance (its loopback), for
        `kubectl port-forward`. Raises NotFound (no such instance, or not running),
        Unavailable (nothing listens there, or the instance cannot be reached: the message
        says which), NotSupported."""
        ...
