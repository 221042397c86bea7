"""The register of gated Pods: an Event is due only when what a Pod waits for changes (or it is
a new Pod under the same name); a change of offerings wakes the Pods watching that provider, a
cleared block the Pods held by a block, and both wake every Pod in an attempt."""

from __future__ import annotations

from placement.gated import GatedRegister, Waiting

SOLD_OUT_A = Waiting("u-1", "WaitingForCapacity", "sold out (next look 12:01)", 1.0, frozenset({"gpu-a"}), False, "a")
SOLD_OUT_A_LATER = Waiting(
    "u-1", "WaitingForCapacity", "sold out (next look 12:02)", 2.0, frozenset({"gpu-a"}), False, "a"
)
BLOCKED_B = Waiting("u-2", "WaitingForCapacity", "blocked", 1.0, frozenset(), True, "b")
NO_POOL = Waiting("u-3", "NoPool", "NodePool 'x' does not exist")


def test_an_event_is_due_once_per_change_of_what_the_pod_waits_for() -> None:
    register = GatedRegister()
    assert register.note("default/a", SOLD_OUT_A)
    assert not register.note("default/a", SOLD_OUT_A_LATER)  # the same wait, worded at a later time
    assert register.note("default/a", Waiting("u-1", "WaitingForCapacity", "blocked", 1.0, waits_for="b"))
    assert register.note("default/a", Waiting("u-9", "WaitingForCapacity", "sold out", 1.0, waits_for="a"))  # a new Pod
    assert register.note("default/c", NO_POOL)
    assert not register.note("default/c", NO_POOL)
    assert register.note("default/c", Waiting("u-3", "NoPool", "NodePool 'y' does not exist"))


def test_offerings_wake_their_watchers_a_cleared_block_the_blocked_and_both_wake_attempts_in_flight() -> None:
    register = GatedRegister()
    register.note("default/a", SOLD_OUT_A)
    register.note("default/b", BLOCKED_B)
    register.note("default/c", NO_POOL)
    assert register.woken_by_offerings("gpu-a") == ["default/a"]
    assert register.woken_by_offerings("gpu-z") == []
    assert register.woken_by_blocklist() == ["default/b"]
    register.begin("default/d")  # its decision may predate the change: it looks again too
    assert register.woken_by_offerings("gpu-z") == ["default/d"]
    assert register.woken_by_blocklist() == ["default/b", "default/d"]
    register.end("default/d")
    assert register.woken_by_offerings("gpu-z") == []
    assert register.watching_offerings()
    register.forget("default/a")
    assert not register.watching_offerings() and register.get("default/a") is None
