"""What the pod controller should do for one Pod: pure functions of what it observes.

Called by `vnode.podcontroller` for every key it processes (`decide`), and for a live Pod
the Handler does not track with what the provider's last list (and a `get`) showed of its
claim (`take_up`); the controller only performs what they return. Table-tested in
tests/vnode/test_decisions.py. Never does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kube import names
from providers.base import Instance, InstanceId
from vnode.model.tracking import Lookup, Tracked, pod_claim

_TERMINAL = ("Succeeded", "Failed")


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
    if _finished(pod):
        return Decision(Action.ADOPT_FINISHED, "terminal Pods are never provisioned again", pod=pod)
    return Decision(Action.CREATE_OR_ADOPT, "an untracked live Pod", pod=pod)


# -- a Pod the Handler does not track (new, or a cold map after a restart) --------------------
class TakeUp(enum.Enum):
    WAIT = "the provider could not be asked whether the Pod has an instance: look again later"
    ADOPT = "track the instance found for the Pod's claim (no provider call)"
    PROVISION = "provision the Pod's instance"
    CONFIRM_GONE = "no list shows the instance the Pod records: ask the provider for it by id"
    LOSE = "the instance the Pod records is gone: a crash under the Pod's restart policy"
    NOTHING = "a finished Pod whose instance is gone: nothing to track"


@dataclass(frozen=True)
class Seen:
    """What the controller observed of an untracked Pod's claim: the inventory's `lookup`
    (FOUND with the `found` instance, NOT_FOUND, or UNKNOWN: could not ask), and, once
    `confirmed`, what `get` of the instance recorded on the Pod returned (`got`; None: gone)."""

    lookup: Lookup
    found: Instance | None = None
    confirmed: bool = False
    got: Instance | None = None


@dataclass(frozen=True)
class Untracked:
    """The step for an untracked Pod and what carrying it out needs.

    `instance`: for ADOPT, the instance to track. `instance_id`: for CONFIRM_GONE and LOSE, the
    instance recorded on the Pod. `delay`: for WAIT, the seconds before looking again.
    `finished`: the Pod is terminal in the API (it is never provisioned, nor refreshed once adopted).
    `slow`: the step calls the provider (the controller hands it to the operation pool).
    """

    step: TakeUp
    why: str
    finished: bool = False
    instance: Instance | None = None
    instance_id: InstanceId | None = None
    delay: float | None = None

    @property
    def slow(self) -> bool:
        return self.step in (TakeUp.PROVISION, TakeUp.CONFIRM_GONE)


def take_up(pod: Mapping[str, Any], seen: Seen, *, retry_after: float) -> Untracked:
    """The step for a Pod `decide` left to CREATE_OR_ADOPT or ADOPT_FINISHED, given what was
    `seen` of its claim; `retry_after` is how long to wait when the provider could not be
    asked (the poll interval: one list per interval is shared by every waiting Pod). A Pod
    that records an instance no list shows is confirmed gone by `get` before anything else
    (a list may be late): gone, a `Never` Pod is never run again, and under Always/OnFailure
    a new instance is a restart, counted and told, never a silent replacement."""
    finished = _finished(pod)
    if seen.lookup is Lookup.UNKNOWN:
        why = "provider unreachable: cannot tell whether this Pod already has an instance"
        return Untracked(TakeUp.WAIT, why, finished=finished, delay=retry_after)
    if seen.found is not None:
        return Untracked(TakeUp.ADOPT, "the last list shows the claim's instance", finished, instance=seen.found)
    if finished:
        return Untracked(TakeUp.NOTHING, "terminal Pods are never provisioned again", finished)
    recorded = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.INSTANCE_ID_ANNOTATION)
    if not recorded:
        return Untracked(TakeUp.PROVISION, "no instance for the claim, and none recorded on the Pod")
    instance_id = InstanceId(recorded)
    if not seen.confirmed:
        return Untracked(
            TakeUp.CONFIRM_GONE, "a list may be late: ask for the recorded instance", instance_id=instance_id
        )
    if seen.got is not None and seen.got.claim == pod_claim(pod):
        return Untracked(TakeUp.ADOPT, "get found the instance recorded on the Pod", instance=seen.got)
    why = f"instance {recorded} recorded on the Pod is gone (found so when the node started tracking the Pod)"
    return Untracked(TakeUp.LOSE, why, instance_id=instance_id)


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in _TERMINAL
