"""The interruption book: each interrupted Pod counted once (by uid) for its workload (its
controller's uid) at the time its notice says; the history carried on placed Pods read back by
a new book (a restart); the window; the bound of 20; and the fallback's words."""

from __future__ import annotations

import json
from typing import Any

from kube import names
from placement.interruptions import (
    MAX_HISTORY,
    InterruptionBook,
    fall_back,
    format_history,
    interrupted_at,
    parse_history,
)
from placement.interruptspec import MAX_WINDOW
from placement.pools import NodePool, PoolProvider, parse_pool
from providers.base import Tier
from tests.support.clock import ManualClock
from tests.support.factories import make_pod

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
RS = "rs-uid-1"


def owned(uid: str, *, workload: str | None = RS, **fields: Any) -> dict[str, Any]:
    refs = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": workload, "controller": True}]
    return make_pod(f"p-{uid}", uid=uid, metadata={"ownerReferences": refs if workload else []}, **fields)


def interrupted(
    uid: str, issued: float | None = None, *, reason: str = names.REASON_SPOT_INTERRUPTED
) -> dict[str, Any]:
    """A Pod the vnode ended for a notice: Failed, its reason, the notice on the annotation."""
    notice = {"kind": "SpotInterruption", "id": f"n-{uid}"}
    if issued is not None:
        notice["issuedAt"] = format_history([issued])
    pod = owned(uid, status={"phase": "Failed", "reason": reason})
    pod["metadata"]["annotations"] = {names.INTERRUPTION_ANNOTATION: json.dumps(notice)}
    return pod


def test_each_interrupted_pod_counts_once_at_its_notices_time() -> None:
    book = InterruptionBook(ManualClock(NOW))
    first = interrupted("a", NOW - 600)
    assert book.observe(first) is True
    assert book.observe(first) is False  # the same Pod seen again (a resync, a status write): not counted twice
    assert book.observe(interrupted("b", NOW - 60, reason=names.REASON_PREEMPTED)) is True
    assert (
        book.observe(owned("c", status={"phase": "Failed", "reason": names.REASON_FAILED})) is False
    )  # its own failure
    assert book.observe(owned("d", status={"phase": "Running"})) is False
    assert book.recent(RS, 3600) == [NOW - 600, NOW - 60]
    assert book.observe(None) is False


def test_a_bare_pod_is_not_counted() -> None:
    book = InterruptionBook(ManualClock(NOW))
    bare = interrupted("a", NOW)
    bare["metadata"]["ownerReferences"] = []
    assert book.observe(bare) is False


def test_the_time_is_the_notices_else_the_containers_finish_else_now() -> None:
    finished = owned("f", status={"phase": "Failed", "reason": names.REASON_PREEMPTED, "containerStatuses": [
        {"name": "main", "state": {"terminated": {"finishedAt": "2027-01-15T07:50:00Z"}}},
        {"name": "side", "state": {"terminated": {"finishedAt": "2027-01-15T07:55:00Z"}}},
    ]})  # fmt: skip
    assert interrupted_at(finished, NOW) == NOW - 300
    assert interrupted_at(interrupted("n", NOW - 900), NOW) == NOW - 900
    assert interrupted_at(owned("x", status={"phase": "Failed"}), NOW + 0.7) == NOW


def test_a_new_book_knows_the_history_the_placed_pod_carries() -> None:
    """After a restart the interrupted Pods may be gone (their ReplicaSet's were deleted); the Pod
    placed for the workload carries the times, and a fresh book reads them back."""
    before = InterruptionBook(ManualClock(NOW))
    before.observe(interrupted("a", NOW - 600))
    before.observe(interrupted("b", NOW - 60))
    carried = format_history(before.recent(RS, 3600))
    assert carried == "2027-01-15T07:50:00Z,2027-01-15T07:59:00Z"
    placed = owned("c", status={"phase": "Running"})
    placed["metadata"]["annotations"] = {names.INTERRUPTIONS_ANNOTATION: carried}

    after = InterruptionBook(ManualClock(NOW))
    after.observe(placed)
    assert after.recent(RS, 3600) == [NOW - 600, NOW - 60]
    after.observe(interrupted("b", NOW - 60))  # one of them still listed: the same interruption, not a third
    assert after.recent(RS, 3600) == [NOW - 600, NOW - 60]
    after.observe(interrupted("d", NOW - 60))  # another Pod at the same second is one more
    assert after.recent(RS, 3600) == [NOW - 600, NOW - 60, NOW - 60]
    assert after.recent("other-workload", 3600) == []


def test_the_window_and_the_bound_of_twenty() -> None:
    clock = ManualClock(NOW)
    book = InterruptionBook(clock)
    for n in range(30):
        book.observe(interrupted(f"p{n}", NOW - 3000 + n * 10))
    recent = book.recent(RS, 3600)
    assert len(recent) == MAX_HISTORY == 20
    assert recent == [NOW - 3000 + n * 10 for n in range(10, 30)]  # the newest kept, newest last
    assert book.recent(RS, 2800) == [NOW - 3000 + n * 10 for n in range(21, 30)]
    clock.advance(3600)
    assert book.recent(RS, 3600) == []  # every one left the window


def test_history_text_round_trips_and_skips_what_is_not_a_time() -> None:
    assert parse_history("2027-01-15T07:59:00Z, bad ,2027-01-15T07:50:00Z,") == [NOW - 600, NOW - 60]
    assert parse_history(None) == []


def test_a_pool_falls_back_to_on_demand_after_n_within_the_window() -> None:
    book = InterruptionBook(ManualClock(NOW))
    spec = {"providers": [{"name": "gpu-a"}], "capacityTypes": ["Spot", "OnDemand"]}
    pool = parse_pool({"metadata": {"name": "train"}, "spec": {**spec, "interruption": {"fallbackToOnDemandAfter": 2}}})
    book.observe(interrupted("a", NOW - 600))
    assert book.fallback(RS, pool) is None
    book.observe(interrupted("b", NOW - 60))
    fallback = book.fallback(RS, pool)
    assert fallback is not None and fallback.count == 2
    assert (
        fallback.message
        == "2 interruptions within 1h (spec.interruption.fallbackToOnDemandAfter: 2): placing on OnDemand"
    )
    on_demand, skip = fall_back(pool, fallback)
    assert on_demand.capacity_types == (Tier.ON_DEMAND,)
    assert skip is not None and skip.text() == (
        "Spot: 2 interruptions of this workload within 1h (spec.interruption.fallbackToOnDemandAfter: 2)"
    )
    assert book.fallback(RS, pool, NOW + 3600 - 599) is None  # the first left the window
    never = NodePool("p", (PoolProvider("gpu-a"),), capacity_types=(Tier.SPOT, Tier.ON_DEMAND))
    assert book.fallback(RS, never) is None  # no fallbackToOnDemandAfter: never


def reclaimed(uid: str, condition: dict[str, Any] | None) -> dict[str, Any]:
    """A Pod a provider reclaimed without notice: no `nebula.io/interruption`, no container
    finish, only the condition the vnode set when it ended it."""
    status: dict[str, Any] = {"phase": "Failed", "reason": names.REASON_PREEMPTED}
    if condition is not None:
        status["conditions"] = [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2027-01-15T07:00:00Z"},
            condition,
        ]
    return owned(uid, status=status)


def test_without_notice_or_finish_the_time_is_the_pods_own_at_every_sighting() -> None:
    target = {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "2027-01-15T07:58:00Z"}
    assert interrupted_at(reclaimed("r", target), NOW) == NOW - 120
    assert interrupted_at(reclaimed("r", target), NOW + 999) == NOW - 120  # seen again later: the same time
    not_ready = {"type": "Ready", "status": "False", "lastTransitionTime": "2027-01-15T07:57:00Z"}
    pod = reclaimed("r", not_ready)
    pod["status"]["conditions"] = pod["status"]["conditions"][1:]  # only Ready=False
    assert interrupted_at(pod, NOW + 999) == NOW - 180
    assert interrupted_at(reclaimed("r", None), NOW + 0.7) == NOW  # nothing on the Pod: when it was seen


def test_a_kept_failed_pod_seen_after_a_restart_is_not_counted_twice() -> None:
    """A Job keeps its Failed Pod; the Pod placed after it carries the interruption's time. A new
    book that sees both (in either order) counts one interruption, not two."""
    target = {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "2027-01-15T07:58:00Z"}
    before = InterruptionBook(ManualClock(NOW - 100))
    before.observe(reclaimed("a", target))
    placed = owned("b", status={"phase": "Running"})
    placed["metadata"]["annotations"] = {names.INTERRUPTIONS_ANNOTATION: format_history(before.recent(RS, 3600))}

    after = InterruptionBook(ManualClock(NOW + 600))  # the restart, later
    after.observe(placed)
    after.observe(reclaimed("a", target))
    assert after.recent(RS, 3600) == [NOW - 120]


def test_a_trimmed_pod_seen_again_is_never_counted_again() -> None:
    clock = ManualClock(NOW)
    book = InterruptionBook(clock)
    kept = reclaimed("a", None)  # nothing stable on it: its time is when it was first seen
    assert book.observe(kept) is True
    clock.advance(MAX_WINDOW + 1)
    assert book.observe(interrupted("b", clock.now)) is True  # trims "a": no window reaches it
    assert book.observe(kept) is False  # a resync shows the kept Pod again
    assert book.recent(RS, 3600) == [clock.now]


def carrying(uid: str, workload: str, times: list[float]) -> dict[str, Any]:
    """A placed Pod of `workload` carrying its interruption times."""
    pod = owned(uid, workload=workload, status={"phase": "Running"})
    pod["metadata"]["annotations"] = {names.INTERRUPTIONS_ANNOTATION: format_history(times)}
    return pod


def test_a_workload_with_nothing_left_is_dropped() -> None:
    clock = ManualClock(NOW)
    book = InterruptionBook(clock)
    book.observe(interrupted("a", NOW - 60))
    book.observe(carrying("b", "job-uid", [NOW - 30]))
    assert len(book) == 2
    clock.advance(MAX_WINDOW)
    book.observe(interrupted("c", clock.now, reason=names.REASON_FAILED))  # not an interruption; trims RS
    book.observe(carrying("d", "job-uid", [NOW - 30]))  # its only time is out of reach now
    assert len(book) == 0
    assert book.recent(RS, MAX_WINDOW) == [] and book.recent("job-uid", MAX_WINDOW) == []


def test_the_least_recently_used_workload_goes_past_the_bound() -> None:
    book = InterruptionBook(ManualClock(NOW), max_workloads=2)
    book.observe(carrying("a", "old", [NOW - 3000]))  # interrupted longest ago ...
    book.observe(carrying("b", "new", [NOW - 60]))
    assert book.recent("old", 3600) == [NOW - 3000]  # ... but asked for since: used most recently
    book.observe(carrying("c", "third", [NOW - 30]))
    assert len(book) == 2
    assert book.recent("new", 3600) == []  # the least recently used went
    assert book.recent("old", 3600) == [NOW - 3000]
    assert book.recent("third", 3600) == [NOW - 30]


def test_the_same_carried_text_is_parsed_once(monkeypatch: Any) -> None:
    parsed: list[str] = []

    def counting(text: Any) -> list[float]:
        parsed.append(text)
        return parse_history(text)

    monkeypatch.setattr("placement.interruptions.parse_history", counting)
    book = InterruptionBook(ManualClock(NOW))
    for _ in range(3):  # a status write, a resync, another Pod of the workload carrying the same
        book.observe(carrying("a", RS, [NOW - 60]))
    assert len(parsed) == 1
    book.observe(carrying("a", RS, [NOW - 60, NOW - 30]))
    assert len(parsed) == 2 and book.recent(RS, 3600) == [NOW - 60, NOW - 30]
