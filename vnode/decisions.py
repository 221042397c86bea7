"""What the pod controller should do for one Pod: a pure function of what it observes.

Called by `vnode.podcontroller` for every key it processes; the controller only performs
the `Decision` it returns. Table-tested in tests/vnode/test_decisions.py. Never does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vnode.tracking import Tracked


class Action(enum.Enum):
    NOTHING = "nothing"
    TERMINATE_GONE = "terminate the tracked instance of a Pod no longer in the API under this UID"
    TERMINATE_TOMBSTONE = "terminate the instance of a deleted Pod known only by its last state"
    TERMINATE_THEN_DELETE = "terminate, then delete the Pod object once the instance is gone"
    CREATE_OR_ADOPT = "look the claim up; adopt the instance or provision one"
    ADOPT_FINISHED = "look a finished Pod's claim up: track its instance (logs), terminate it if it bills"
    UPDATE = "refresh the tracked Pod, carry out its due step (restart, replace, release), write what changed"


@dataclass(frozen=True)
class Decision:
    """The action and what carrying it out needs.

    `pod`: the Pod to act on (the live one, or the tombstone for TERMINATE_TOMBSTONE).
    `uid`: for TERMINATE_GONE, the tracked entry's UID (terminate that one, not a successor's).
    `successor`: for TERMINATE_GONE, a new Pod took the name: look again once the old is gone.
    `why`: for logs and tests.
    """

    action: Action
    why: str
    pod: Mapping[str, Any] | None = None
    uid: str | None = None
    successor: bool = False


def decide(
    pod: Mapping[str, Any] | None, tracked: Tracked | None, tombstone: Mapping[str, Any] | None = None
) -> Decision:
    """The decision for a Pod (None: gone from the API), given the Handler's record of it
    and the last state of a deleted tracked Pod (`tombstone`), if any."""
    if pod is None:
        if tracked is not None:
            return Decision(Action.TERMINATE_GONE, "the Pod was deleted from the API", uid=tracked.uid)
        if tombstone is not None:
            return Decision(Action.TERMINATE_TOMBSTONE, "a deleted Pod is no longer tracked", pod=tombstone)
        return Decision(Action.NOTHING, "neither in the API nor tracked")
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return Decision(Action.TERMINATE_THEN_DELETE, "the Pod is being deleted", pod=pod)
    if tracked is not None and tracked.uid == meta.get("uid"):
        return Decision(Action.UPDATE, "the Pod is tracked", pod=pod)
    if tracked is not None:
        why = "a new Pod took the name: the old one's instance goes first"
        return Decision(Action.TERMINATE_GONE, why, uid=tracked.uid, successor=True)
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return Decision(Action.ADOPT_FINISHED, "terminal Pods are never provisioned again", pod=pod)
    return Decision(Action.CREATE_OR_ADOPT, "an untracked live Pod", pod=pod)
