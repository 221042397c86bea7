"""Equal status pieces shared between Pods: one frozen dict for each equal condition or running state.

Called by `vnode.model.status` and `vnode.model.containerstatus` as they build a status; a piece
handed out here is a `Frozen` dict that raises on any change in place (a change must build a new
dict), and the table behind it is bounded (`MAX_SHARED`, least recently used dropped). Does no I/O.
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


@lru_cache(maxsize=MAX_SHARED)
def condition(kind: str, status: str, moved_at: Any, reason: str = "", message: str = "") -> Frozen:
    """The condition `kind` (`lastProbeTime` null), with `reason` and `message` when given."""
    piece: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": moved_at}
    if reason:
        piece["reason"] = reason
    if message:
        piece["message"] = message
    return Frozen(piece)


@lru_cache(maxsize=MAX_SHARED)
def running(started_at: str) -> Frozen:
    """A container state `{"running": {"startedAt": started_at}}`."""
    return Frozen(running=Frozen(startedAt=started_at))


def table_size() -> int:
    """How many pieces the table remembers now (never more than `MAX_SHARED` of each kind)."""
    return condition.cache_info().currsize + running.cache_info().currsize
