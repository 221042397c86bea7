"""The settled ledger (placement.ledger): folding a deleted Pod's spend once, spreading it over
UTC days and hours, bounding it, and reading back what it wrote (or refusing what it did not)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kube.billing import EMPTY as NO_BILLING
from kube.billing import Billing
from placement import ledger
from placement.ledger import EMPTY, OTHER, Ledger, LedgerError, Piece, Row

T0 = datetime(2026, 12, 5, 10, 30, tzinfo=UTC).timestamp()  # 10:30 UTC


def billed(start: float, end: float | None) -> Billing:
    record = NO_BILLING.opened(start, "i-1")
    return record if end is None else record.closed_at(end)


def test_fold_is_idempotent_on_uid() -> None:
    piece = Piece("gpu-a", "team", 36.0, billed(T0 - 600, T0))  # $36/h for 10 min: $6
    once = ledger.fold(EMPTY, [piece], "uid-1", T0)
    twice = ledger.fold(once, [piece], "uid-1", T0 + 3600)
    assert twice == once
    assert once.total == (Row("gpu-a", "team", pytest.approx(6.0), 0.0),)
    assert once.pods == ("uid-1",)
    other = ledger.fold(once, [piece], "uid-2", T0)
    assert other.total[0].dollars == pytest.approx(12.0)


@pytest.mark.parametrize(
    ("start", "end", "days", "hours"),
    [
        # 10:00-10:30 UTC: one day, one hour
        (T0 - 1800, T0, {"2026-12-05": 18.0}, {"2026-12-05T10": 18.0}),
        # 09:30-10:30: half in each hour
        (T0 - 3600, T0, {"2026-12-05": 36.0}, {"2026-12-05T09": 18.0, "2026-12-05T10": 18.0}),
        # 23:30 the day before to 00:30: split over two days; hours older than 25 h dropped
        (
            T0 - 11 * 3600,
            T0 - 10 * 3600,
            {"2026-12-04": 18.0, "2026-12-05": 18.0},
            {"2026-12-04T23": 18.0, "2026-12-05T00": 18.0},
        ),
        # 30 hours ago, for one hour: in its day, not in the hours table
        (T0 - 30 * 3600, T0 - 29 * 3600, {"2026-12-04": 36.0}, {}),
    ],
)
def test_fold_spreads_over_utc_days_and_hours(
    start: float, end: float, days: dict[str, float], hours: dict[str, float]
) -> None:
    folded = ledger.fold(EMPTY, [Piece("gpu-a", "team", 36.0, billed(start, end))], "uid", T0)
    assert {k: v["gpu-a"] for k, v in folded.days.items()} == pytest.approx(days)
    assert {k: v["gpu-a"] for k, v in folded.hours.items()} == pytest.approx(hours)
    assert sum(r.dollars for r in folded.total) == pytest.approx(36.0 * (end - start) / 3600)


def test_an_open_span_is_counted_up_to_now_and_unknown_prices_as_unpriced_seconds() -> None:
    pieces = [Piece("gpu-a", "team", 36.0, billed(T0 - 600, None)), Piece("gpu-b", "team", None, billed(T0 - 60, T0))]
    folded = ledger.fold(EMPTY, pieces, "uid", T0)
    rows = {(r.provider, r.namespace): r for r in folded.total}
    assert rows["gpu-a", "team"].dollars == pytest.approx(6.0)
    assert rows["gpu-b", "team"] == Row("gpu-b", "team", 0.0, 60.0)
    assert "gpu-b" not in folded.days["2026-12-05"]  # an unknown price is no dollars, not $0 of them
    assert folded.unpriced_seconds() == 60.0


def test_prune_bounds_every_part() -> None:
    rows = tuple(Row("gpu-a", f"ns-{i:03}", float(i + 1), 0.0) for i in range(300))
    days = {ledger.day_key(T0 - d * 86_400): {"gpu-a": 1.0} for d in range(70)}
    hours = {ledger.hour_key(T0 - h * 3_600): {"gpu-a": 1.0} for h in range(30)}
    pods = tuple(f"uid-{i}" for i in range(2100))
    pruned = ledger.prune(Ledger(rows, days, hours, pods), T0)
    assert len(pruned.total) == ledger.MAX_ROWS
    assert sum(r.dollars for r in pruned.total) == pytest.approx(sum(r.dollars for r in rows))
    other = [r for r in pruned.total if r.namespace == OTHER]
    assert len(other) == 1 and other[0].dollars == pytest.approx(sum(range(1, 46)))  # the 45 smallest
    assert len(pruned.days) == ledger.DAYS_KEPT and min(pruned.days) == ledger.day_key(T0 - 61 * 86_400)
    assert len(pruned.hours) == ledger.HOURS_KEPT
    assert pruned.pods == pods[-ledger.MAX_UIDS :]
    assert ledger.prune(pruned, T0, present={"uid-2099", "uid-0"}).pods == ("uid-2099",)


def test_dump_and_parse_round_trip() -> None:
    folded = ledger.fold(EMPTY, [Piece("gpu-a", "team", 36.0, billed(T0 - 3600, T0))], "uid-1", T0)
    assert ledger.parse(ledger.dump(folded)) == ledger.parse(ledger.dump(ledger.parse(ledger.dump(folded))))
    assert ledger.parse(ledger.dump(folded)).pods == ("uid-1",)
    assert ledger.parse(None) == EMPTY


@pytest.mark.parametrize(
    "raw",
    [
        "text",
        {"total": [["gpu-a", "ns", "x", 0]]},
        {"total": [["gpu-a", "ns", -1, 0]]},
        {"total": [["gpu-a"]]},
        {"days": {"yesterday": {"gpu-a": 1}}},
        {"hours": {"2026-12-05T10": {"gpu-a": float("nan")}}},
        {"days": [["2026-12-05"]]},
    ],
)
def test_a_garbled_ledger_is_refused(raw: Any) -> None:
    with pytest.raises(LedgerError):
        ledger.parse(raw)
