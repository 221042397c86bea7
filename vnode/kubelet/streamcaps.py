"""Process-wide caps on the kubelet API's long-lived streams (I7): forwarded connections,
exec/attach sessions and followed logs, counted across every connection and session.

One `StreamCaps` per `server.Listeners`, sized by `limits.Limits`; the port-forward
session, the exec/attach protocols and the containerLogs view take a place before they
start a stream and give it back when it ends. A stream refused here is refused alone (its
connection and session live on). Never blocks; safe from any thread.
Tests: tests/vnode/kubelet/test_stream_caps.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from vnode.kubelet.limits import Limits


class Gauge:
    """How many streams of one kind are open in the process, against their cap."""

    def __init__(self, kind: str, cap: int, setting: str) -> None:
        self.kind = kind  # plural words: "forwarded connections"
        self.cap = cap
        self.setting = setting  # the LISTENER_LIMITS key that sets `cap`
        self.open = 0
        self.refused = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """A place for one more stream; False (and counted as refused) at the cap."""
        with self._lock:
            if self.open >= self.cap:
                self.refused += 1
                return False
            self.open += 1
            return True

    def give(self) -> None:
        """Give back a place `take` gave (exactly once per successful take)."""
        with self._lock:
            if self.open <= 0:
                raise RuntimeError(f"{self.kind}: a place given back that was never taken")
            self.open -= 1

    def refusal(self) -> str:
        """What a refused client is told: the cap, and the setting that raises it."""
        return (
            f"this node already has {self.cap} {self.kind} open, its limit "
            f"(LISTENER_LIMITS['{self.setting}']); try again when some have closed"
        )


@dataclass(frozen=True)
class StreamCaps:
    forwards: Gauge  # forwarded connections of every port-forward session
    threaded_forwards: Gauge  # those of them pumped by threads (a provider without `detach`)
    sessions: Gauge  # exec and attach sessions, SPDY and websocket
    followers: Gauge  # containerLogs answers still streaming (`follow`, or a long read)

    @classmethod
    def from_limits(cls, limits: Limits) -> StreamCaps:
        return cls(
            forwards=Gauge("forwarded connections", limits.forwards_total, "forwards_total"),
            threaded_forwards=Gauge(
                "forwarded connections pumped by threads", limits.forwards_threaded, "forwards_threaded"
            ),
            sessions=Gauge("exec and attach sessions", limits.sessions_total, "sessions_total"),
            followers=Gauge("log streams", limits.followers_total, "followers_total"),
        )
