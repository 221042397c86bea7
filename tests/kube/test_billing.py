"""The Pod's billing record: spans open and close, bounded, spend computed exactly from facts."""

from __future__ import annotations

import pytest

from kube import billing
from kube.billing import EMPTY, MAX_SPANS, Billing, BillingError, Span

DAY = 86_400.0


def test_an_open_span_counts_to_now_and_a_closed_one_to_its_end() -> None:
    record = EMPTY.opened(1_000.0, "i-1")
    assert record.billing and record.seconds(now=1_600.0) == 600.0
    record = record.closed_at(1_300.0)
    assert not record.billing
    assert record.seconds(now=10_000.0) == 300.0
    assert billing.dollars(2.5, record.seconds(now=10_000.0)) == pytest.approx(2.5 * 300 / 3600)


def test_opening_the_same_instance_again_changes_nothing_and_another_closes_the_first() -> None:
    record = EMPTY.opened(100.0, "i-1")
    assert record.opened(150.0, "i-1") is record
    replaced = record.opened(400.0, "i-2")
    assert replaced.closed == (Span(100.0, 400.0, 300.0),)
    assert replaced.open == 400.0 and replaced.instance == "i-2"


def test_a_close_never_ends_before_its_start() -> None:
    assert EMPTY.opened(500.0, "i").closed_at(400.0).closed == (Span(500.0, 500.0, 0.0),)


def test_seconds_within_a_window_split_at_midnight() -> None:
    record = EMPTY.opened(DAY - 600.0, "i").closed_at(DAY + 900.0)
    assert record.seconds(now=2 * DAY, since=DAY) == 900.0
    assert record.seconds(now=2 * DAY, until=DAY) == 600.0
    assert billing.day_start(DAY + 900.0) == DAY
    assert billing.next_day(DAY + 900.0) == 2 * DAY


def test_the_record_is_bounded_and_its_total_stays_exact() -> None:
    record = EMPTY
    for n in range(MAX_SPANS * 3):
        record = record.opened(n * 100.0, f"i-{n}").closed_at(n * 100.0 + 10.0)
    assert len(record.closed) == MAX_SPANS
    assert record.seconds(now=1e9) == pytest.approx(MAX_SPANS * 3 * 10.0)
    assert len(billing.dump(record)) < billing.MAX_TEXT


def test_dump_and_parse_round_trip() -> None:
    record = EMPTY.opened(10.5, "i-1").closed_at(20.25).opened(30.0, "i-2")
    assert billing.parse(billing.dump(record)) == record
    assert billing.parse(None) == EMPTY and billing.parse("") == EMPTY


@pytest.mark.parametrize("text", ["[]", "{", '{"closed": [[1, 2]]}', '{"open": "x"}', '{"open": NaN}', "x" * 5000])
def test_a_record_not_ours_is_an_error(text: str) -> None:
    with pytest.raises(BillingError):
        billing.parse(text)


def test_month_start_is_the_first_of_the_utc_month() -> None:
    # 2026-12-05T10:00:00Z
    now = 1_796_464_800.0
    assert billing.month_start(now) == 1_796_083_200.0  # 2026-12-01T00:00:00Z
    assert Billing().seconds(now=now) == 0.0
