"""A replica's right to write for one Lease, as of its monotonic clock: `Fence` is valid from
when a take allows (at once, or after the wait of a takeover from a live holder) until its last
renewal's start + the duration - the margin; `FencedError` is a write refused for want of it.

Handed out by `kube.leases.SharedLeases` (which extends and revokes it); checked by every fenced
writer (kube/events.py, vnode/fencing.py, kube/sharing.py's Term, the leader). Never reads the
API server nor a wall clock. Tests: tests/kube/test_leases.py, tests/kube/test_lease_strangers.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kube.client import KubeError


class FencedError(KubeError):
    """A write refused before it was sent: this replica's Lease for it is no longer valid."""

    def __init__(self, lease: str) -> None:
        super().__init__(0, "Fenced", f"lease {lease} is not held (or ran out): not writing")


class Fence:
    """Whether this replica may still write for one Lease; `check` raises FencedError when not."""

    def __init__(self, lease: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease = lease
        self._clock = clock
        self._from = float("-inf")  # a Lease taken from a live stranger: not before a duration later
        self._until = float("-inf")

    def extend(self, until: float, *, not_before: float | None = None) -> None:
        """Valid until `until`; a take (`not_before` given) also sets when validity begins."""
        if not_before is not None:
            self._from = not_before
        self._until = until

    def revoke(self) -> None:
        self._until = float("-inf")

    def valid(self) -> bool:
        return self._from <= self._clock() < self._until

    def held(self) -> bool:
        """Valid now, or `pending`: not yet run out nor revoked."""
        return self._clock() < self._until

    def pending(self) -> bool:
        """Held, but taken from a live stranger too recently to write for yet."""
        now = self._clock()
        return now < self._from and now < self._until

    def check(self) -> None:
        if not self.valid():
            raise FencedError(self.lease)
