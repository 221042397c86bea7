"""A network namespace of the test's own, standing for a Pod network: `lo` up, with the
addresses the test gives it (a Pod IP, the API server's Service IP), so a process may bind
fixed ports on every interface (runvnode's `:10250`, `:8443`) while other suites on this
machine bind the same ones in theirs.

`PodNetwork` starts a holder process (`unshare -n`, as root) that lives while the test's end
of its stdin pipe is open, so the namespace goes away with the test even when the test
process is killed. Other processes join it with `argv()` (`nsenter -t <holder> -n`); an
in-process server joins it with `call_inside()` (a thread that `setns(2)`s first, so the
threads it starts and the processes they fork are inside too). Used by
tests/support/rigs/install.py; nothing here is a test.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


class PodNetwork:
    """The namespace, its addresses on `lo` (each a /32), and how to run things inside it."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self.addresses = tuple(addresses)
        self._holder: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
            pytest.skip("a network namespace of the test's own needs root, unshare and nsenter")
        ip = shutil.which("ip")
        if ip is None:
            pytest.skip("needs iproute2's `ip` to bring the namespace's loopback up")
        setup = " && ".join(
            [f"{ip} link set lo up", *(f"{ip} addr add {a}/32 dev lo" for a in self.addresses), "echo ready"]
        )
        # `read` returns at EOF: when the test closes the pipe, or dies, the holder exits.
        self._holder = subprocess.Popen(
            ["unshare", "--net", "--", "sh", "-c", f"{setup} && read _"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        assert self._holder.stdout is not None
        if self._holder.stdout.readline() != b"ready\n":
            error = self._holder.stderr.read() if self._holder.stderr else b""
            self.stop()
            raise AssertionError(f"could not set up the network namespace: {error.decode(errors='replace')}")

    def stop(self) -> None:
        """SIGKILL every process left in the namespace (the test started each of them: nothing
        else can enter it), then let the holder go, and the namespace with it."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        for pid in self._members(holder.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if holder.stdin is not None:
            holder.stdin.close()
        try:
            holder.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(10)
        for stream in (holder.stdout, holder.stderr):
            if stream is not None:
                stream.close()

    @property
    def pid(self) -> int:
        if self._holder is None:
            raise RuntimeError("the network namespace is not started")
        return self._holder.pid

    def argv(self, command: Sequence[str]) -> list[str]:
        """`command` run inside the namespace (and in this process's mount namespace)."""
        return ["nsenter", "-t", str(self.pid), "-n", "--", *command]

    def call_inside(self, function: Callable[[], T]) -> T:
        """`function()` on a thread that joined the namespace first; its sockets, the threads it
        starts and the processes those fork are inside. Exceptions are re-raised here."""
        result: list[T] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self._join()
                result.append(function())
            except BaseException as exc:  # re-raised on the caller's thread
                failure.append(exc)

        thread = threading.Thread(target=run, name="in-pod-network", daemon=True)
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return result[0]

    @staticmethod
    def _members(holder: int) -> list[int]:
        """The processes whose network namespace is the holder's, the holder and this one aside
        (this process's own threads that joined it are not listed: /proc/<pid>/ns is the main
        thread's)."""
        try:
            held = os.stat(f"/proc/{holder}/ns/net")
        except OSError:
            return []
        members = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in (holder, os.getpid()):
                continue
            try:
                found = os.stat(f"/proc/{entry}/ns/net")
                if (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino):
                    members.append(int(entry))
            except OSError:  # gone, or not ours to read
                continue
        return members

    def _join(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/proc/{self.pid}/ns/net", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"setns: {os.strerror(error)}")
        finally:
            os.close(fd)
