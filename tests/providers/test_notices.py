"""The notice seam's values (providers/notices.py): a bounded detail, the handling order, and
the providers that declare the protocol."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from providers.base import InstanceId, Notice, NoticeKind, NoticeSource
from providers.notices import MAX_DETAIL, handling_order

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _notice(kind: NoticeKind, *, deadline: datetime | None = None, detail: str = "") -> Notice:
    return Notice(f"n-{kind.value}", InstanceId("i-1"), kind, AT, deadline=deadline, detail=detail)


def test_a_notice_keeps_at_most_max_detail_characters_of_the_providers_words() -> None:
    notice = _notice(NoticeKind.SPOT_INTERRUPTION, detail="x" * (MAX_DETAIL * 3))
    assert len(notice.detail) == MAX_DETAIL
    assert notice.detail.endswith("...")
    assert _notice(NoticeKind.SPOT_INTERRUPTION, detail="short").detail == "short"


def test_only_a_rebalance_recommendation_takes_no_capacity() -> None:
    taking = {kind for kind in NoticeKind if _notice(kind).takes_capacity}
    assert taking == set(NoticeKind) - {NoticeKind.REBALANCE}


def test_a_batch_is_handled_capacity_takers_first_soonest_deadline_first() -> None:
    late = _notice(NoticeKind.SPOT_INTERRUPTION, deadline=AT + timedelta(minutes=2))
    soon = _notice(NoticeKind.MAINTENANCE, deadline=AT + timedelta(seconds=30))
    rebalance = _notice(NoticeKind.REBALANCE)
    stopping = _notice(NoticeKind.STOPPING)  # no deadline: at once (its issue time)
    assert handling_order([rebalance, late, soon, stopping]) == [stopping, soon, late, rebalance]


def test_the_protocol_is_checkable_at_run_time() -> None:
    class Source:
        def notices(self, wait: float) -> list[Notice]:
            return []

        def ack(self, notice: Notice) -> None:
            return None

    assert isinstance(Source(), NoticeSource)
    assert not isinstance(object(), NoticeSource)
