"""Equal status pieces shared between Pods: one frozen dict for each equal condition or running
state, one frozen list for each equal list of conditions.

Called by `vnode.model.status` and `vnode.model.containerstatus` as they build a status; a piece
handed out here (`Frozen`, `FrozenList`) raises on any change in place (a change builds a new one),
and each table behind them is bounded (`MAX_SHARED`, least recently used dropped). Does no I/O.
Tests: tests/vnode/test_shared_status.py.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any, NoReturn

MAX_SHARED = 4096  # distinct pieces remembered; an evicted one lives on in the Pods that hold it


class Frozen(dict[str, Any]):
    """A dict several Pods' statuses hold at once: reading, comparing and JSON are a dict's;
    any change in place raises TypeError. A copy (`dict(piece)`, `copy.copy`, `copy.deepcopy`)
    is a plain dict, free to change."""

    __slots__ = ()

    def _frozen(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a shared status piece is never changed in place: build a new dict")

    __setitem__ = _frozen
    __delitem__ = _frozen
    __ior__ = _frozen
    clear = _frozen
    pop = _frozen
    popitem = _frozen
    setdefault = _frozen
    update = _frozen

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self) -> tuple[type[Frozen], tuple[dict[str, Any]]]:
        return Frozen, (dict(self),)

    def __hash__(self) -> int:  # type: ignore[override]  # by value, as a frozenset: it never changes
        return hash(frozenset(self.items()))


class FrozenList(list[Any]):
    """A list several Pods' statuses hold at once (their conditions, each a `Frozen`): reading,
    comparing and JSON are a list's; any change in place raises TypeError; a copy is a plain list."""

    __slots__ = ()

    def _frozen(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a shared status piece is never changed in place: build a new list")

    __setitem__ = _frozen
    __delitem__ = _frozen
    __iadd__ = _frozen
    __imul__ = _frozen
    append = _frozen
    extend = _frozen
    insert = _frozen
    pop = _frozen
    remove = _frozen
    clear = _frozen
    sort = _frozen
    reverse = _frozen

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(value, memo) for value in self]

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[Any]]]:
        return FrozenList, (list(self),)


def condition_dict(kind: str, status: str, moved_at: Any, reason: str = "", message: str = "") -> dict[str, Any]:
    """The condition `kind` (`lastProbeTime` null), with `reason` and `message` when given: a
    plain dict of its own (`condition` is the shared one)."""
    piece: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": moved_at}
    if reason:
        piece["reason"] = reason
    if message:
        piece["message"] = message
    return piece


@lru_cache(maxsize=MAX_SHARED)
def condition(kind: str, status: str, moved_at: Any, reason: str = "", message: str = "") -> Frozen:
    """`condition_dict`, one frozen dict for every equal condition."""
    return Frozen(condition_dict(kind, status, moved_at, reason, message))


@lru_cache(maxsize=MAX_SHARED)
def running(started_at: str) -> Frozen:
    """A container state `{"running": {"startedAt": started_at}}`."""
    return Frozen(running=Frozen(startedAt=started_at))


@lru_cache(maxsize=MAX_SHARED)
def _conditions(pieces: tuple[Frozen, ...]) -> FrozenList:
    return FrozenList(pieces)


def conditions(pieces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The list of `pieces`: one `FrozenList` for every equal list when each piece is shared
    (a `Frozen` from `condition`), else `pieces` itself."""
    if all(type(piece) is Frozen for piece in pieces):
        return _conditions(tuple(pieces))  # each is a Frozen: checked above
    return pieces


def table_size() -> int:
    """How many pieces the tables remember now (never more than `MAX_SHARED` of each kind)."""
    return sum(cached.cache_info().currsize for cached in (condition, running, _conditions))
