"""The one bound on ephemeral containers' kept output (`kubectl logs -c <ephemeral>`) in a
process (I7), shared by every provider's `Ephemerals`: `PROCESS_BUDGET` unless given another.

Each `vnode.ephemeral.streams.Fanout` asks `reserve` before it maps a new chunk of output and
says when its process ended; past the limit the budget drops the output of the container that
ended first, whole, then cuts running ones (the largest first) down to `floor`. It never waits
on I/O and never writes to the API: a member is told what it lost after the lock is released.
Tests: tests/vnode/test_ephemeral_budget.py.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from vnode.ephemeral.ring import CHUNK

MIB = 1024 * 1024
DEFAULT_LIMIT = 64 * MIB  # NEBULA['EPHEMERAL_OUTPUT_BUDGET']: bytes kept across every ephemeral container
PER_CONTAINER = 4 * MIB  # the newest bytes one container keeps (the budget permitting)
FLOOR = 2 * CHUNK  # what a running container keeps however full the budget: its newest 64 KiB at least
MIN_LIMIT = MIB
MAX_RUNNING = 64  # ephemeral containers running at once in the process (each holds a few threads and its floor)
MAX_LIMIT = 1024 * MIB


class Member(Protocol):
    """One container's kept output, as the budget sees it."""

    def kept_chunks(self) -> int: ...

    def drop_kept(self, chunks: int | None) -> tuple[int, int]:
        """Unmap the first `chunks` chunks (never the one being written), or all of them for
        None (for good); (bytes of memory freed, bytes of output lost)."""
        ...

    def told_dropped(self, lost: int, *, whole: bool) -> None:
        """Called without the budget's lock: `lost` bytes of its output were dropped for the
        budget, all of it (`whole`, it had ended) or its oldest (it runs on)."""
        ...


@dataclass(eq=False)
class _Account:
    member: Member
    held: int = 0  # bytes of memory mapped or reserved for it
    ended: bool = False
    cut: bool = False  # told once that its older output was cut while it ran


Notice = tuple[Member, int, bool]


class OutputBudget:
    """Thread-safe. Its lock is taken before a member's own, never after."""

    def __init__(self, limit: int = DEFAULT_LIMIT, *, floor: int = FLOOR, per_container: int = PER_CONTAINER) -> None:
        if floor < CHUNK or floor % CHUNK or per_container < floor or per_container % CHUNK:
            raise ValueError(f"floor and per_container must be whole chunks of {CHUNK} bytes, floor <= per_container")
        self.floor, self.per_container = floor, per_container
        self.limit = check_limit(limit, floor=floor)
        self._lock = threading.Lock()
        self._accounts: dict[int, _Account] = {}
        self._ended: OrderedDict[int, None] = OrderedDict()  # members with output to drop, first ended first
        self._kept = 0
        self.peak = 0  # the most ever kept at once (after each reservation's drops)
        self.dropped = 0  # bytes of output dropped for the budget, ended and running
        self.max_running = MAX_RUNNING
        self.running = 0  # ephemeral containers admitted (starting or running) and not yet ended

    def admit(self) -> bool:
        """A place for one more running ephemeral container; False at `max_running` (I7)."""
        with self._lock:
            if self.running >= self.max_running:
                return False
            self.running += 1
            return True

    def discharge(self) -> None:
        """An admitted container ended, or never started: its place is free (once per `admit`)."""
        with self._lock:
            if self.running <= 0:
                raise RuntimeError("an ephemeral container discharged that was never admitted")
            self.running -= 1

    def kept(self) -> int:
        """Bytes of memory held for kept output across every member."""
        with self._lock:
            return self._kept

    def members(self) -> int:
        with self._lock:
            return len(self._accounts)

    def set_limit(self, limit: int) -> None:
        """A new limit (the setting, at start-up); ValueError changes nothing. Applied at once."""
        check_limit(limit, floor=self.floor)
        with self._lock:
            self.limit = limit
            notices = self._enforce()
        _tell(notices)

    def join(self, member: Member) -> None:
        with self._lock:
            self._accounts.setdefault(id(member), _Account(member))

    def reserve(self, member: Member, chunks: int) -> None:
        """`member` maps `chunks` new chunks next (the caller appends right after, the only
        writer to it): its own oldest go past `per_container`, then others' past the limit."""
        if chunks <= 0:
            return
        with self._lock:
            account = self._accounts.get(id(member))
            if account is None:
                return  # it left: its output is not kept any more
            over = account.held + chunks * CHUNK - self.per_container
            if over > 0:
                freed, _ = member.drop_kept(-(-over // CHUNK))
                account.held -= freed
                self._kept -= freed
            account.held += chunks * CHUNK
            self._kept += chunks * CHUNK
            notices = self._enforce()
            self.peak = max(self.peak, self._kept)
        _tell(notices)

    def ended(self, member: Member) -> None:
        """Its process ended: its output is the first to go once the limit is reached."""
        with self._lock:
            account = self._accounts.get(id(member))
            if account is None or account.ended:
                return
            account.ended = True
            if account.held:
                self._ended[id(member)] = None

    def leave(self, member: Member) -> None:
        """Its Pod is gone: its output is unmapped and no longer counted."""
        with self._lock:
            account = self._accounts.pop(id(member), None)
            self._ended.pop(id(member), None)
            if account is not None:
                member.drop_kept(None)
                self._kept -= account.held

    def _enforce(self) -> list[Notice]:
        """Under the lock: drop until at most `limit` is kept, or every running member is at
        its floor (running ones keep `floor` however many they are)."""
        notices: list[Notice] = []
        stuck: set[int] = set()
        while self._kept > self.limit:
            if self._ended:
                key, _ = self._ended.popitem(last=False)
                account = self._accounts[key]
                freed, lost = account.member.drop_kept(None)
                self._release(account, freed, lost)
                if lost:
                    notices.append((account.member, lost, True))
                continue
            running = [
                (key, a)
                for key, a in self._accounts.items()
                if not a.ended and a.held > self.floor and key not in stuck
            ]
            if not running:
                break
            key, account = max(running, key=lambda item: item[1].held)
            count = min(-(-(self._kept - self.limit) // CHUNK), (account.held - self.floor) // CHUNK)
            freed, lost = account.member.drop_kept(count)
            if not freed:
                stuck.add(key)  # only its chunk being written is mapped (the rest is reserved)
                continue
            self._release(account, freed, lost)
            if not account.cut:
                account.cut = True
                notices.append((account.member, lost, False))
        return notices

    def _release(self, account: _Account, freed: int, lost: int) -> None:
        account.held -= freed
        self._kept -= freed
        self.dropped += lost


def check_limit(limit: object, *, floor: int = FLOOR) -> int:
    """`limit` as bytes, or ValueError saying what it must be."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not max(MIN_LIMIT, floor) <= limit <= MAX_LIMIT:
        raise ValueError(
            f"the ephemeral output budget must be whole bytes from {MIN_LIMIT} to {MAX_LIMIT}, not {limit!r}"
        )
    return limit


def _tell(notices: list[Notice]) -> None:
    for member, lost, whole in notices:
        member.told_dropped(lost, whole=whole)


PROCESS_BUDGET = OutputBudget()  # the process's one bound: every Ephemerals' unless told otherwise
