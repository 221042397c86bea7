"""The shared Leases' rules on a real Lease store (the embedded API server) with a fake
monotonic clock: a free Lease is taken, a live one is never written, a dead one only after
its (holder, renewTime) stayed unchanged for a full duration of the taker's own clock; the
holder's fence ends `margin` before any taker may begin, and a Lease someone else took ends
it at once; a fenced client and a fenced provider refuse writes and mutations, and pass the
rest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

from kube.client import Kube, path_for
from kube.leases import MEMBER, NODE, FencedError, LeaseView, SharedLeases, member_lease, node_lease
from providers import errors
from providers.fake import FakeProvider
from providers.owner import Owner
from providers.streams import ContainerStopper, Executor, Restarter
from tests.support.clock import ManualClock
from vnode.fencing import fenced

DURATION, MARGIN = 15.0, 5.0
NAME = node_lease("gpu")


def replica(kube: Kube, identity: str, clock: ManualClock) -> SharedLeases:
    return SharedLeases(kube, namespace="default", identity=identity, duration=DURATION, margin=MARGIN, clock=clock)


def lease(kube: Kube, name: str = NAME) -> dict[str, Any]:
    return dict(kube.get(path_for("leases", namespace="default", name=name, group="coordination.k8s.io")))


def test_a_free_lease_is_taken_and_renewed_and_its_fence_ends_margin_before_a_taker_may_begin(kube: Kube) -> None:
    clock = ManualClock(1000.0)
    me = replica(kube, "me", clock)
    me.refresh()
    assert me.hold(NAME, NODE)
    held = lease(kube)
    assert held["spec"]["holderIdentity"] == "me" and held["metadata"]["labels"] == {"nebula.io/lease": "node"}
    assert held["spec"]["leaseDurationSeconds"] == int(DURATION)
    fence = me.fence(NAME)
    clock.now += DURATION - MARGIN - 0.01
    assert fence.valid()
    fence.check()
    clock.now += 0.02
    assert not fence.valid()
    with pytest.raises(FencedError, match="not writing"):
        fence.check()
    me.refresh()
    assert me.hold(NAME, NODE)  # nobody else wrote: renewed, valid again
    assert fence.valid()
    assert lease(kube)["spec"]["leaseTransitions"] == 0


def test_a_live_lease_is_never_written_and_a_dead_one_is_taken_after_a_full_duration_unchanged(kube: Kube) -> None:
    holder_clock, taker_clock = ManualClock(1000.0), ManualClock(50.0)  # two machines: unrelated monotonic clocks
    holder, taker = replica(kube, "holder", holder_clock), replica(kube, "taker", taker_clock)
    holder.refresh()
    assert holder.hold(NAME, NODE)
    taker.refresh()  # first sight of the holder's renewal, at the taker's 50.0
    before = lease(kube)
    taker_clock.now += DURATION - 0.1
    taker.refresh()
    assert not taker.hold(NAME, NODE)
    assert lease(kube) == before  # not even written
    # The holder renews: the taker's wait starts again from when it sees the change.
    holder_clock.now += 2.0
    holder.refresh()
    assert holder.hold(NAME, NODE)
    taker_clock.now += 1.0
    taker.refresh()
    taker_clock.now += DURATION - 0.1
    taker.refresh()
    assert not taker.hold(NAME, NODE)
    taker_clock.now += 0.2  # now a full duration unchanged
    taker.refresh()
    assert taker.hold(NAME, NODE)
    spec = lease(kube)["spec"]
    assert spec["holderIdentity"] == "taker" and spec["leaseTransitions"] == 1
    # The old holder, resuming, sees another holder: its fence ends at once, and it writes nothing.
    assert holder.fence(NAME).valid()  # by its own clock it still could...
    holder.refresh()
    assert not holder.fence(NAME).valid()  # ...until it saw the Lease taken
    assert not holder.hold(NAME, NODE)
    assert lease(kube)["spec"]["holderIdentity"] == "taker"


class SlowReads:
    """A Kube whose reads take `latency` seconds of the reader's clock, with `during` run while
    the read is on the wire (before the server answers it)."""

    def __init__(self, kube: Kube, clock: ManualClock, latency: float) -> None:
        self._kube, self._clock, self.latency = kube, clock, latency
        self.during: Callable[[], None] = lambda: None

    def get(self, path: str) -> Any:
        self._clock.now += self.latency / 2  # sent...
        self.during()
        answer = self._kube.get(path)
        self._clock.now += self.latency / 2  # ...answered
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)


def test_a_taker_dates_a_renewal_from_when_its_slow_read_answered_so_the_holders_fence_ends_first(kube: Kube) -> None:
    holder_clock, taker_clock = ManualClock(1000.0), ManualClock(50.0)
    holder = replica(kube, "holder", holder_clock)
    slow = SlowReads(kube, taker_clock, latency=2 * MARGIN)  # a read slower than the fencing margin
    taker = SharedLeases(
        cast(Kube, slow), namespace="default", identity="taker", duration=DURATION, margin=MARGIN, clock=taker_clock
    )
    holder.refresh()
    assert holder.hold(NAME, NODE)

    def renew() -> None:  # the holder's renewal begins and lands after the taker's read was sent
        holder_clock.now += 1.0
        assert holder.hold(NAME, NODE)

    slow.during = renew
    taker.observe(NAME)  # sent at 50, the renewal lands, answered at 60
    slow.during = lambda: None
    fence_left = DURATION - MARGIN  # the holder may write until this long after its renewal began
    # The holder's renewal began while the read was on the wire, at the taker's 55 at the latest:
    # the holder writes until 55 + fence_left; the taker may not begin before that, plus the margin.
    taker_clock.now = 50.0 + DURATION + 0.1  # a duration after the read was *sent*: too soon
    slow.latency = 0.0
    taker.observe(NAME)
    assert not taker.hold(NAME, NODE)
    assert lease(kube)["spec"]["holderIdentity"] == "holder"
    taker_clock.now = 60.0 + DURATION  # a duration after it *answered*: the holder's fence ran out
    assert taker_clock.now >= 55.0 + fence_left + MARGIN
    taker.observe(NAME)
    assert taker.hold(NAME, NODE)


def test_two_takers_never_both_win_a_lease_they_both_saw_free(kube: Kube) -> None:
    clock = ManualClock(1000.0)
    first, second = replica(kube, "first", clock), replica(kube, "second", clock)
    first.refresh()
    second.refresh()
    assert first.hold(NAME, NODE)
    assert not second.hold(NAME, NODE)  # created meanwhile: a conflict, not a second holder
    stale = lease(kube)
    first.refresh()
    assert first.hold(NAME, NODE)  # a renewal: a new resourceVersion
    second.view.update([dict(stale, spec=dict(stale["spec"], holderIdentity=""))], clock())  # as if read before it
    assert not second.hold(NAME, NODE)  # its write carries the old resourceVersion: refused
    assert lease(kube)["spec"]["holderIdentity"] == "first"


def test_a_released_lease_is_free_at_once_and_the_releaser_stops_writing_first(kube: Kube) -> None:
    clock = ManualClock(1000.0)
    first, second = replica(kube, "first", clock), replica(kube, "second", clock)
    first.refresh()
    assert first.hold(NAME, NODE)
    first.release(NAME)
    assert not first.fence(NAME).valid()
    second.refresh()
    assert second.hold(NAME, NODE)
    assert lease(kube)["spec"]["holderIdentity"] == "second"


def test_live_members_are_counted_and_a_dead_member_is_forgotten(kube: Kube) -> None:
    clock = ManualClock(1000.0)
    one, two = replica(kube, "one", clock), replica(kube, "two", clock)
    for member in (one, two):
        member.refresh()
        assert member.hold(member_lease(member.identity), MEMBER)
    one.refresh()
    assert one.view.members(clock()) == ["one", "two"]
    clock.now += DURATION
    one.refresh()
    assert one.hold(member_lease("one"), MEMBER)
    assert one.view.members(clock()) == ["one"]  # two stopped renewing a duration ago
    clock.now += 3 * DURATION
    one.refresh()
    (dead,) = one.view.dead_members(clock(), after=4 * DURATION)
    one.forget(dead)
    one.refresh()
    assert one.view.get(member_lease("two")) is None
    one.delete(member_lease("one"))
    one.refresh()
    assert one.view.members(clock()) == []


def test_the_view_counts_a_change_from_when_it_is_seen() -> None:
    view = LeaseView()
    held = {"metadata": {"name": NAME, "labels": {"nebula.io/lease": "node"}}, "spec": {"holderIdentity": "x"}}
    held["spec"].update(renewTime="t1", leaseDurationSeconds=10)
    view.update([held], 0.0)
    view.update([held], 9.0)
    assert not view.takeable(NAME, "me", 9.9)
    assert view.takeable(NAME, "me", 10.0)
    assert view.takeable(NAME, "x", 1.0)  # its own
    renewed = dict(held, spec=dict(held["spec"], renewTime="t2"))
    view.update([renewed], 10.0)
    assert not view.takeable(NAME, "me", 19.9)
    view.update([], 20.0)
    assert view.get(NAME) is None and view.takeable(NAME, "me", 20.0)


def test_bad_margins_are_refused(kube: Kube) -> None:
    for margin in (0.0, DURATION, -1.0):
        with pytest.raises(ValueError, match="fencing margin"):
            SharedLeases(kube, namespace="default", identity="x", duration=DURATION, margin=margin)


def test_a_fenced_client_refuses_writes_and_passes_reads(kube: Kube) -> None:
    allowed = [True]

    def check() -> None:
        if not allowed[0]:
            raise FencedError(NAME)

    client = kube.fenced(check)
    body = {"metadata": {"name": "fenced"}, "data": {"a": "1"}}
    client.create(path_for("configmaps", namespace="default"), body)
    allowed[0] = False
    with pytest.raises(FencedError):
        client.patch(path_for("configmaps", namespace="default", name="fenced"), {"data": {"a": "2"}})
    with pytest.raises(FencedError):
        client.delete(path_for("configmaps", namespace="default", name="fenced"))
    assert client.get(path_for("configmaps", namespace="default", name="fenced"))["data"] == {"a": "1"}
    assert "fenced" in [i["metadata"]["name"] for i in client.list(path_for("configmaps", namespace="default"))[0]]


def test_a_fenced_provider_refuses_mutations_as_unavailable_and_keeps_its_capabilities() -> None:
    provider = FakeProvider("gpu", {"cloud": "fence-test"}, owner=Owner("fence-test", "gpu"))
    valid = [False]
    wrapped = fenced(provider, lambda: valid[0], NAME)
    assert wrapped.name == "gpu" and wrapped.list() == []  # reads pass
    assert isinstance(provider, Executor)
    for capability in (Executor, Restarter, ContainerStopper):
        assert isinstance(wrapped, capability) == isinstance(provider, capability)
    with pytest.raises(errors.Unavailable, match=f"lease {NAME} is not held"):
        wrapped.terminate("i-1")
    assert provider.cloud.call_counts().get("terminate", 0) == 0  # refused before the cloud was asked
    valid[0] = True
    wrapped.terminate("i-1")  # passed on: the fake's terminate of an unknown id is a no-op
    assert provider.cloud.call_counts()["terminate"] == 1
