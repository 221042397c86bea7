"""Providers shared out across replicas: each replica serves the virtual nodes whose Lease it holds.

Started by the manager's process wiring (`nebula_site`) when providers are shared
(`--share-providers`), over any Runner that fits `Shareable` (kube knows no Nebula Runner).
Every `retry` seconds one loop (`Sharing.tick`):
1. lists the shared Leases (`kube.leases`) and renews this replica's member Lease (the first
   round does only this, so replicas that start together count each other before they take);
2. stops at once any Runner whose node Lease ran out or was taken (its fence already refuses
   its writes; a fresh Runner is built if the Lease is held again, as its memory may be stale);
3. renews every node Lease it holds;
4. holds at most ceil(M/N) of the M providers while N replicas are alive: beyond that it gives
   one back (stops its Runner, in-flight calls finishing, then releases the Lease); below it,
   it takes free, dead or strangers' ones in its own preference order (rendezvous hashing, so
   replicas prefer different providers and rarely race for one). One taken from a live
   stranger is renewed but served (its Runner built) only once its fence is valid, a full
   duration later (`kube.leases`).
A Runner's writes (the API server and its provider's provision / terminate / restart /
stop_container) pass only while its own `Term` is valid: the node Lease's fence, and not
ended. Placement, the mirror and the console stay with the leader Lease.
Tests: tests/kube/test_sharing.py, tests/nebula_site/test_sharing_managers.py.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from kube.client import KubeError
from kube.leases import MEMBER, NODE, Fence, FencedError, SharedLeases, member_lease, node_lease
from kube.worker import describe, join_within

logger = logging.getLogger(__name__)

DEAD_MEMBER_AFTER = 4  # lease durations without a renewal before a member Lease is deleted


def quota(providers: int, members: int) -> int:
    """The most providers one replica holds while `members` replicas are alive."""
    return math.ceil(providers / max(1, members))


def preference(identity: str, aliases: Sequence[str]) -> list[str]:
    """`aliases` in this replica's order of preference: rendezvous hashing, so each replica's
    order differs and a provider's first choice is spread evenly across replicas."""
    return sorted(aliases, key=lambda alias: hashlib.sha256(f"{identity}/{alias}".encode()).hexdigest())


class Term:
    """One Runner's right to write: its node Lease's fence, until the term is ended."""

    def __init__(self, fence: Fence) -> None:
        self._fence = fence
        self._ended = False

    def end(self) -> None:
        self._ended = True

    def valid(self) -> bool:
        return not self._ended and self._fence.valid()

    def check(self) -> None:
        if not self.valid():
            raise FencedError(self._fence.lease)


class NodeNamed(Protocol):
    @property
    def node_name(self) -> str: ...


class Shareable(Protocol):
    """What the loop needs of a Runner: start it, stop it within a timeout (returning the
    threads still busy), and its virtual node's name for the log."""

    @property
    def handler(self) -> NodeNamed: ...

    def start(self) -> None: ...

    def stop(self, timeout: float) -> list[threading.Thread]: ...


R = TypeVar("R", bound=Shareable)
RunnerFactory = Callable[[str, Term], R]  # alias, term -> a Runner whose writes pass only while the term is valid


@dataclass
class Served(Generic[R]):
    runner: R
    term: Term
    stopping: threading.Thread | None = None  # set once the Runner is stopping (given back, or lapsed)
    give_back: bool = False  # release the Lease once stopped
    busy: list[threading.Thread] = field(default_factory=list)  # what the Runner's stop left in flight


class Sharing(Generic[R]):
    """This replica's share of the providers. `on_change` gets the Runners served after every
    change (the process keeps the kubelet registry and the console in step)."""

    def __init__(
        self,
        leases: SharedLeases,
        aliases: Sequence[str],
        build: RunnerFactory[R],
        *,
        retry: float,
        stop_timeout: float,
        on_change: Callable[[list[R]], None] = lambda runners: None,
    ) -> None:
        self._leases = leases
        self._aliases = list(aliases)
        self._order = preference(leases.identity, aliases)
        self._build = build
        self._retry = retry
        self._stop_timeout = stop_timeout
        self._on_change = on_change
        self._member = member_lease(leases.identity)
        self._served: dict[str, Served[R]] = {}
        self._pending: set[str] = set()  # held, taken from a stranger: served once the fence is valid
        self._rounds = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._drained = threading.Event()
        self._thread: threading.Thread | None = None

    def runners(self) -> list[R]:
        with self._lock:
            return [s.runner for s in self._served.values() if s.stopping is None]

    def serving(self) -> list[str]:
        """The aliases whose Runner runs here now."""
        with self._lock:
            return sorted(alias for alias, s in self._served.items() if s.stopping is None)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="provider sharing", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.tick()
            except Exception:
                logger.exception("provider sharing: a round failed")
            if not self._stop.is_set():
                self._stop.wait(self._retry)
            elif self._served:
                self._drained.wait(min(self._retry, 0.2))
            else:
                return

    def tick(self) -> None:
        """One round (see the module docstring). Once stopping: no takes, every Runner given
        back, renewals kept up until the last one stopped."""
        leases = self._leases
        if self._stop.is_set():
            self._release_pending()
            for alias, served in list(self._served.items()):
                if served.stopping is None:
                    served.give_back = True
                    self._begin_stop(alias, served)
        try:
            leases.refresh()
        except KubeError as exc:
            logger.warning("provider sharing: cannot list the leases: %s", exc)
            self._stop_lapsed()
            return
        self._stop_lapsed()
        self._finish_stopped()
        for alias in list(self._served):
            self._renew(alias)
        if self._stop.is_set():
            return
        self._serve_pending()
        try:
            leases.hold(self._member, MEMBER)
        except KubeError as exc:
            logger.warning("provider sharing: cannot renew the member lease: %s", exc)
        self._rounds += 1
        if self._rounds < 2:  # the first round only says this replica is here: replicas starting
            return  # together see each other before any takes, so none takes all and gives most back
        share = quota(len(self._aliases), len(leases.view.members(leases.clock())))
        held = len(self._served) + len(self._pending)
        if held > share and self._pending:
            self._release_pending(one=True)
        elif held > share and not any(s.give_back for s in self._served.values()):
            self._give_back(share)
        elif held < share:
            self._take(share - held)
        self._forget_dead_members()

    def _renew(self, alias: str) -> None:
        try:
            self._leases.hold(node_lease(alias), NODE)
        except KubeError as exc:
            logger.warning("provider sharing: cannot renew %s (serving until it runs out): %s", node_lease(alias), exc)

    def _serve_pending(self) -> None:
        """Renew the Leases taken from strangers; serve those whose fence is valid now, forget
        those lost again (taken back, or run out)."""
        with self._lock:
            pending = sorted(self._pending)
        for alias in pending:
            self._renew(alias)
            fence = self._leases.fence(node_lease(alias))
            if fence.valid():
                with self._lock:
                    self._pending.discard(alias)
                self._serve(alias)
            elif not fence.held():
                with self._lock:
                    self._pending.discard(alias)
                logger.warning("provider sharing: %s, taken from a stranger, was lost again", node_lease(alias))

    def _release_pending(self, *, one: bool = False) -> None:
        """Stop renewing Leases taken from strangers and not served yet, without writing them
        free: a release would let any replica take one at once, before the wait that makes the
        takeover safe has passed (whoever takes it next waits out this replica's renewals)."""
        with self._lock:
            dropped = sorted(self._pending, key=self._order.index, reverse=True)[: 1 if one else None]
            self._pending.difference_update(dropped)
        for alias in dropped:
            self._leases.fence(node_lease(alias)).revoke()

    def _stop_lapsed(self) -> None:
        """A Runner whose Lease ran out (or was taken) stops now; its writes are refused already."""
        for alias, served in list(self._served.items()):
            if served.stopping is None and not served.term.valid():
                node = served.runner.handler.node_name
                logger.error("virtual node %s: lease %s lost; stopping its Runner", node, node_lease(alias))
                served.term.end()  # nothing more from this Runner, even if the Lease comes back
                self._begin_stop(alias, served)

    def _give_back(self, share: int) -> None:
        """Give one provider back: the least preferred of those served."""
        served = [a for a in reversed(self._order) if a in self._served and self._served[a].stopping is None]
        if served:
            logger.info("provider sharing: %d held, a share is %d; giving %s back", len(self._served), share, served[0])
            self._served[served[0]].give_back = True
            self._begin_stop(served[0], self._served[served[0]])

    def _begin_stop(self, alias: str, served: Served[R]) -> None:
        def stop_runner() -> None:
            served.busy = served.runner.stop(self._stop_timeout)

        served.stopping = threading.Thread(target=stop_runner, name=f"stop {alias}", daemon=True)
        served.stopping.start()
        self._on_change(self.runners())

    def _finish_stopped(self) -> None:
        """Runners done stopping: release a given-back Lease (after the Runner wrote its last)."""
        for alias, served in list(self._served.items()):
            if served.stopping is None or served.stopping.is_alive():
                continue
            self._end(alias, served)
        if not self._served:
            self._drained.set()

    def _end(self, alias: str, served: Served[R]) -> None:
        if served.busy:
            node = served.runner.handler.node_name
            logger.warning("virtual node %s stopped with work in flight: %s", node, describe(served.busy))
        served.term.end()
        if served.give_back:
            self._leases.release(node_lease(alias))
        with self._lock:
            del self._served[alias]

    def _take(self, wanted: int) -> None:
        at = self._leases.clock()
        for alias in self._order:
            name = node_lease(alias)
            if wanted <= 0:
                return
            if alias in self._served or alias in self._pending:
                continue
            if not self._leases.view.takeable(name, self._leases.identity, at):
                continue
            try:
                if not self._leases.hold(name, NODE):
                    continue
            except KubeError as exc:
                logger.warning("provider sharing: cannot take %s: %s", name, exc)
                continue
            wanted -= 1
            if self._leases.fence(name).pending():
                with self._lock:
                    self._pending.add(alias)
                logger.info("provider sharing: %s taken from a stranger; served once its fence is valid", name)
            else:
                self._serve(alias)

    def _serve(self, alias: str) -> None:
        """Build and start the Runner of a provider whose node Lease this replica holds."""
        name = node_lease(alias)
        term = Term(self._leases.fence(name))
        runner = self._build(alias, term)
        runner.start()
        with self._lock:
            self._served[alias] = Served(runner, term)
        logger.info("virtual node %s: served here (lease %s)", runner.handler.node_name, name)
        self._on_change(self.runners())

    def _forget_dead_members(self) -> None:
        at = self._leases.clock()
        for seen in self._leases.view.dead_members(at, after=DEAD_MEMBER_AFTER * self._leases.duration):
            try:
                self._leases.forget(seen)
            except KubeError as exc:
                logger.debug("could not delete a dead member lease: %s", exc)

    def stop(self, timeout: float) -> list[threading.Thread]:
        """Stop sharing: every Runner stops (in-flight calls finish within `timeout`, the Leases
        renewed meanwhile), then each Lease is released and the member Lease deleted, so the
        other replicas take over at once. Returns the threads still busy then."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        busy = join_within([self._thread] if self._thread is not None else [], timeout)
        self._release_pending()
        for alias, served in list(self._served.items()):  # the loop never ran, or did not finish
            if served.stopping is None:
                served.give_back = True
                self._begin_stop(alias, served)
        stopping = [s.stopping for s in self._served.values() if s.stopping is not None]
        busy += join_within(stopping, max(0.0, deadline - time.monotonic()))
        for alias, served in list(self._served.items()):
            busy += served.busy
            self._end(alias, served)
        self._on_change([])
        self._leases.delete(self._member)
        return busy
