"""What the pod controller should do for one Pod: a pure function of what it observes.

Called by `vnode.podcontroller` for every key it processes; table-tested in
tests/vnode/test_decisions.py. Never does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from vnode.tracking import Tracked


class Action(enum.Enum):
    NOTHING = "nothing"
    TERMINATE_GONE = "terminate the instance of a Pod deleted from the API"
    TERMINATE_THEN_DELETE = "terminate, then delete the Pod object once the instance is gone"
    CREATE_OR_ADOPT = "look the claim up; adopt the instance or provision one"
    UPDATE = "refresh the tracked Pod and write pending metadata and status"


def decide(pod: Mapping[str, Any] | None, tracked: Tracked | None) -> Action:
    """The action for a Pod (None: gone from the API) given the Handler's record of it."""
    if pod is None:
        return Action.TERMINATE_GONE
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return Action.TERMINATE_THEN_DELETE
    same_pod = tracked is not None and tracked.uid == meta.get("uid")
    if same_pod:
        return Action.UPDATE
    if tracked is not None:
        return Action.TERMINATE_GONE  # the old Pod of this name went; its successor comes next
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return Action.NOTHING  # terminal Pods are never provisioned again
    return Action.CREATE_OR_ADOPT
