"""The watch hub's wake-up (devcluster/watchstream.py): a change offered while the hub drains
its wake socket is never left waiting for the hub's idle tick, nor is any change after it."""

from __future__ import annotations

import select
import socket

from devcluster.store import Store
from devcluster.watchstream import WatchHub


class WakeDuringDrain:
    """The hub's wake socket, with a writer's wake landing between the hub's look at its flag
    and its read of the socket (once): the interleaving that lost wake-ups for good."""

    def __init__(self, hub: WatchHub, inner: socket.socket) -> None:
        self.hub, self.inner, self.woken = hub, inner, False

    def recv(self, size: int) -> bytes:
        if not self.woken:
            self.woken = True
            self.hub._wake()
        return self.inner.recv(size)


def test_a_wake_landing_during_the_drain_leaves_later_wakes_heard() -> None:
    hub = WatchHub(Store(), bookmark_interval=60.0)  # not started: the test is the hub thread
    inner = hub._wake_r
    try:
        hub._wake()  # a change was offered: the hub is woken
        hub._wake_r = WakeDuringDrain(hub, inner)  # type: ignore[assignment]
        hub._drain_wake()  # the hub's round (its pump follows and takes every change so far)
        hub._wake_r = inner
        hub._wake()  # a later change
        readable, _, _ = select.select([inner], [], [], 0)
        assert readable == [inner]  # the hub is woken for it, not left to its idle tick
    finally:
        inner.close()
        hub._wake_w.close()
