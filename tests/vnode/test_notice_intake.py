"""The notice intake's bookkeeping (vnode/phases/notices.py), stepped by hand on a Handler that
runs no threads: a notice read before its Pod's instance is known is held and taken once it is;
a sooner capacity-taking notice replaces the one that governs; a repeat is acknowledged with its
newest receipt; a held notice about no Pod is dropped after the adoption wait."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from kube import names
from kube.client import Kube
from kube.events import EventRecorder
from providers.base import InstanceId, Notice, NoticeKind
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from vnode.handler import Handler
from vnode.model.interruption import noted, sooner
from vnode.phases import notices as notices_module
from vnode.phases.notices import ADOPTION_WAIT, NoticeIntake

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


class Source:
    """A NoticeSource that remembers what was acknowledged (the intake is stepped by hand)."""

    def __init__(self) -> None:
        self.acked: list[tuple[str, str]] = []

    def notices(self, wait: float) -> list[Notice]:
        return []

    def ack(self, notice: Notice) -> None:
        self.acked.append((notice.id, notice.receipt))


def spot(
    instance: str, *, receipt: str = "r1", minutes: float = 2, kind: NoticeKind = NoticeKind.SPOT_INTERRUPTION
) -> Notice:
    deadline = None if kind is NoticeKind.REBALANCE else AT + timedelta(minutes=minutes)
    return Notice(f"n-{kind.value}-{minutes}", InstanceId(instance), kind, AT, deadline=deadline, receipt=receipt)


def rig(kube: Kube, cloud_name: str, clock: list[float]) -> tuple[Handler, NoticeIntake, Source, list[str]]:
    handler = Handler(
        FakeProvider("gpu", {"cloud": cloud_name}),
        kube=kube,
        events=EventRecorder(kube, component="test"),
        monotonic=lambda: clock[0],
    )
    source, queued = Source(), []
    intake = NoticeIntake(handler.context, source, queue=queued.append)
    return handler, intake, source, queued


def test_a_notice_read_before_its_pods_instance_is_known_is_taken_once_it_is(kube: Kube, cloud_name: str) -> None:
    clock = [100.0]
    handler, intake, source, queued = rig(kube, cloud_name, clock)
    entry = handler.context.tracked.track(make_pod("early", "gpu", uid="u-1", namespace="default"))
    notice = spot("fake-9")
    assert intake.handle([notice]) == 1 and entry.notice is None and not queued  # held: no Pod runs it yet
    intake.settle()
    assert not source.acked  # not dropped within the adoption wait

    entry.instance_id = InstanceId("fake-9")  # adopted (a restarted manager found its instance)
    intake.handle([])  # the next round, with nothing new read
    assert entry.notice is not None and entry.notice.id == notice.id and queued == ["default/early"]
    assert names.INTERRUPTION_ANNOTATION in entry.desired_annotations
    intake.settle()
    assert not source.acked  # acknowledged only once the record is written on the Pod
    entry.written_annotations.update(entry.desired_annotations)
    intake.settle()
    assert source.acked == [(notice.id, "r1")]


def test_a_repeat_while_it_waits_is_acknowledged_with_its_newest_receipt(kube: Kube, cloud_name: str) -> None:
    handler, intake, source, _ = rig(kube, cloud_name, [0.0])
    entry = handler.context.tracked.track(make_pod("repeat", "gpu", uid="u-2", namespace="default"))
    entry.instance_id = InstanceId("fake-1")
    intake.handle([spot("fake-1", receipt="old")])
    assert intake.handle([spot("fake-1", receipt="new")]) == 0  # the same notice again: nothing new
    entry.written_annotations.update(entry.desired_annotations)
    intake.settle()
    assert source.acked == [("n-SpotInterruption-2", "new")]
    intake.handle([spot("fake-1", receipt="newer")])  # delivered after its ack: acknowledged again
    assert source.acked[-1] == ("n-SpotInterruption-2", "newer")


def test_a_sooner_notice_governs_in_place_of_a_later_one(kube: Kube, cloud_name: str) -> None:
    handler, intake, _, queued = rig(kube, cloud_name, [0.0])
    entry = handler.context.tracked.track(make_pod("sooner", "gpu", uid="u-3", namespace="default"))
    entry.instance_id = InstanceId("fake-2")
    intake.handle([spot("fake-2", minutes=60, kind=NoticeKind.MAINTENANCE)])
    intake.handle([spot("fake-2", minutes=2)])
    assert entry.notice is not None and entry.notice.kind is NoticeKind.SPOT_INTERRUPTION
    assert '"kind":"SpotInterruption"' in entry.desired_annotations[names.INTERRUPTION_ANNOTATION]
    intake.handle([spot("fake-2", minutes=30, kind=NoticeKind.MAINTENANCE)])  # later: changes nothing
    assert (
        entry.notice.kind is NoticeKind.SPOT_INTERRUPTION
        and "2026-12-05T12:02:00Z" in (entry.desired_annotations[names.INTERRUPTION_ANNOTATION])
    )
    assert set(queued) == {"default/sooner"}


def test_a_held_notice_about_no_pod_is_dropped_after_the_adoption_wait(kube: Kube, cloud_name: str) -> None:
    clock = [0.0]
    handler, intake, source, _ = rig(kube, cloud_name, clock)
    intake.handle([spot("fake-404")])
    clock[0] += ADOPTION_WAIT * handler.poll_interval - 0.1
    intake.settle()
    assert not source.acked
    clock[0] += 0.2
    intake.settle()
    assert source.acked == [("n-SpotInterruption-2", "r1")]


def test_sooner_orders_notices_by_when_the_capacity_goes() -> None:
    def value(kind: NoticeKind, minutes: float | None) -> object:
        deadline = None if minutes is None else AT + timedelta(minutes=minutes)
        return noted(Notice("i", InstanceId("x"), kind, AT, deadline=deadline), "gpu")

    spot_2, spot_1 = value(NoticeKind.SPOT_INTERRUPTION, 2), value(NoticeKind.SPOT_INTERRUPTION, 1)
    rebalance, stopping = value(NoticeKind.REBALANCE, None), value(NoticeKind.STOPPING, None)
    assert sooner(spot_2, rebalance) and not sooner(rebalance, spot_2)  # type: ignore[arg-type]
    assert sooner(spot_1, spot_2) and not sooner(spot_2, spot_1)  # type: ignore[arg-type]
    assert sooner(stopping, spot_1) and not sooner(spot_1, stopping)  # type: ignore[arg-type]
    assert not sooner(dataclasses.replace(spot_2), spot_2)  # type: ignore[type-var, arg-type]


def test_what_the_intake_holds_is_bounded(kube: Kube, cloud_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notices_module, "MAX_HELD", 3)
    handler, intake, source, _ = rig(kube, cloud_name, [0.0])
    batch = [dataclasses.replace(spot(f"fake-{i}"), id=f"n-{i}") for i in range(5)]
    intake.handle(batch)  # about no Pod here: held, but at most MAX_HELD of them
    assert len(intake._unmatched) == 3
    for i in range(5):  # acknowledged ids are remembered, the oldest forgotten past the bound
        intake._ack(dataclasses.replace(spot("fake-x"), id=f"a-{i}"))
    assert list(intake._handled) == ["a-2", "a-3", "a-4"]
