"""The process-wide registry of running machinery the console reads: Handlers, the Blocklist,
placement (pool cache included), the cluster's view of the nodes other replicas serve
(`console.clusterpods`), and this replica's role: whether it leads, and how a
standby finds the leader (`forwards`, `locate_leader`, read by `console.forward`).

The process wiring (`nebula_site.manager`) fills it (`install`) once Runners and placement
run, and empties it (`clear`) on the way out; it marks the role
(`set_leading`, `install_locator`); the REST API and the admin read it (`current`).
Read-only views of memory, but for the one operator action both offer,
`Runtime.clear_block`: nothing here starts or stops anything.
Tests: tests/console/test_console_units.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from console.clusterpods import ClusterView
from console.leaderpeer import NoLeader, Peer
from placement.blocklist import Blocklist
from placement.spendview import SpendReport
from placement.wiring import Placement
from vnode.handler import Handler

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    handlers: tuple[Handler, ...] = ()
    blocklist: Blocklist | None = None
    placement: Placement | None = None
    cluster: ClusterView | None = None  # the Pods and nodes of providers no Handler here serves

    def spend_report(self, *, charts: bool = True) -> SpendReport | None:
        """Placement's spend report (`Placement.spend_report`), None when placement does not run here."""
        return None if self.placement is None else self.placement.spend_report(charts=charts)

    def clear_block(self, entry_id: str, *, actor: str) -> bool:
        """Clear one blocklist entry in memory; False if there is none. Placement, when it
        runs, logs it and records the Event."""
        if self.placement is not None:
            return self.placement.clear_block(entry_id, actor=actor)
        if self.blocklist is None or not self.blocklist.clear(entry_id):
            return False
        logger.info("blocklist entry %s cleared by %s", entry_id, actor)
        return True


_lock = threading.Lock()
_current = Runtime()


def install(
    *,
    handlers: Sequence[Handler] = (),
    blocklist: Blocklist | None = None,
    placement: Placement | None = None,
    cluster: ClusterView | None = None,
) -> None:
    """Publish what this process runs (the blocklist defaults to placement's)."""
    global _current
    if blocklist is None and placement is not None:
        blocklist = placement.blocklist
    with _lock:
        _current = Runtime(tuple(handlers), blocklist, placement, cluster)


def current() -> Runtime:
    with _lock:
        return _current


def clear() -> None:
    global _current
    with _lock:
        _current = Runtime()


# The role. Without a locator (no leader election, or nothing wired: tests, one-shot commands)
# every request is served here; with one, a process that does not lead forwards.
LeaderLocator = Callable[[], Peer]  # the leader's console; raises NoLeader saying why there is none
_leading = False
_locator: LeaderLocator | None = None


def set_leading(leading: bool) -> None:
    """True once this process's Runners and placement run (`Leading.start`), False when they stop."""
    global _leading
    with _lock:
        _leading = leading


def install_locator(locate: LeaderLocator | None) -> None:
    """How a standby finds the leader's console (None: this process forwards nothing)."""
    global _locator
    with _lock:
        _locator = locate


def forwards() -> bool:
    """Whether console requests go to the leader: a locator is installed and we do not lead."""
    with _lock:
        return _locator is not None and not _leading


def locate_leader() -> Peer:
    """The leader's console (may block on the API server); NoLeader saying why there is none."""
    with _lock:
        locate = _locator
    if locate is None:
        raise NoLeader("this replica has no way to find the leader")
    return locate()


# Which virtual nodes this replica's Runners serve now, and the replica's name (its Lease
# identity): the `nebula_node_served` gauge, on every replica, leader or not.
_replica = ""
_served: tuple[str, ...] = ()


def set_replica(identity: str) -> None:
    """This process's identity, as its Leases name it (`runvnode` sets it once)."""
    global _replica
    with _lock:
        _replica = identity


def set_served(nodes: Sequence[str]) -> None:
    """The virtual nodes whose Runners run in this process now (every change of them)."""
    global _served
    with _lock:
        _served = tuple(sorted(nodes))


def served() -> tuple[str, tuple[str, ...]]:
    """(this replica's identity, the nodes it serves)."""
    with _lock:
        return _replica, _served
