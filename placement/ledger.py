"""A NodePool's settled ledger: the spend of its deleted Pods, kept in `status.spend.settled`,
the crash-safe part of a pool's spend (design I12: never counted twice, never lost).

Pure. Built and written only by the spend settler (`placement.settle`), read by the spend book
(`placement.spend`). `fold` adds one deleted Pod's billed seconds x price (total per
(provider, namespace), per UTC day and per hour by provider) and records its uid, so folding
the same Pod again changes nothing; `prune` keeps it bounded. Never reads the clock: `now` is
always given.
Tests: tests/placement/test_ledger.py::test_fold_is_idempotent_on_uid,
tests/placement/test_ledger.py::test_prune_bounds_every_part.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kube.billing import Billing, dollars

DAYS_KEPT = 62  # UTC days of the days table
HOURS_KEPT = 25  # hours of the hours table
MAX_ROWS = 256  # rows of the total table; the smallest overflow into namespace OTHER
MAX_UIDS = 2000  # folded uids remembered until their Pod is gone
OTHER = "(other)"


class LedgerError(ValueError):
    """`status.spend.settled` is not a ledger Nebula wrote."""


@dataclass(frozen=True)
class Row:
    """The settled spend of one (provider, namespace)."""

    provider: str
    namespace: str
    dollars: float = 0.0
    unpriced_seconds: float = 0.0


@dataclass(frozen=True)
class Piece:
    """What one deleted Pod billed: on `provider`, in `namespace`, at `hourly_price` (None: unknown)."""

    provider: str
    namespace: str
    hourly_price: float | None
    billing: Billing


@dataclass(frozen=True)
class Ledger:
    total: tuple[Row, ...] = ()
    days: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # "2026-12-05" -> provider -> $
    hours: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # "2026-12-05T10" -> provider -> $
    pods: tuple[str, ...] = ()  # folded uids, oldest first

    def dollars_since(self, day: str) -> float:
        """Dollars settled on UTC days from `day` (inclusive, "YYYY-MM-DD") on."""
        return sum(sum(by.values()) for key, by in self.days.items() if key >= day)

    def unpriced_seconds(self) -> float:
        return sum(row.unpriced_seconds for row in self.total)


EMPTY = Ledger()


def day_key(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def hour_key(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H")


def _start(key: str) -> float:
    fmt = "%Y-%m-%dT%H" if "T" in key else "%Y-%m-%d"
    return datetime.strptime(key, fmt).replace(tzinfo=UTC).timestamp()


def _add(
    table: Mapping[str, Mapping[str, float]], key: str, provider: str, amount: float
) -> dict[str, dict[str, float]]:
    out = {k: dict(v) for k, v in table.items()}
    by = out.setdefault(key, {})
    by[provider] = by.get(provider, 0.0) + amount
    return out


def _buckets(start: float, end: float, step: float, key: Any) -> Iterable[tuple[str, float, float]]:
    """(key, since, until) of each bucket of width `step` (an hour or a day) from `start` to `end`."""
    at = start
    while at < end:
        yield key(at), at, at + step
        at += step


def fold(ledger: Ledger, pieces: Iterable[Piece], uid: str, now: float) -> Ledger:
    """`ledger` with the Pod `uid`'s `pieces` added as billed up to `now`; unchanged if `uid`
    was folded already. Days and hours older than what `prune` keeps are counted only in the total."""
    if uid in ledger.pods:
        return ledger
    rows = {(r.provider, r.namespace): r for r in ledger.total}
    days: Mapping[str, Mapping[str, float]] = ledger.days
    hours: Mapping[str, Mapping[str, float]] = ledger.hours
    first_day = _start(day_key(now)) - (DAYS_KEPT - 1) * 86_400.0
    first_hour = _start(hour_key(now)) - (HOURS_KEPT - 1) * 3_600.0
    for piece in pieces:
        seconds = piece.billing.seconds(now=now)
        if seconds <= 0:
            continue
        row = rows.get((piece.provider, piece.namespace), Row(piece.provider, piece.namespace))
        if piece.hourly_price is None:
            rows[(row.provider, row.namespace)] = replace(row, unpriced_seconds=row.unpriced_seconds + seconds)
            continue
        price = piece.hourly_price
        rows[(row.provider, row.namespace)] = replace(row, dollars=row.dollars + dollars(price, seconds))
        for key, since, until in _buckets(first_day, now + 1, 86_400.0, day_key):
            part = piece.billing.seconds(now=now, since=since, until=until)
            if part > 0:
                days = _add(days, key, piece.provider, dollars(price, part))
        for key, since, until in _buckets(first_hour, now + 1, 3_600.0, hour_key):
            part = piece.billing.seconds(now=now, since=since, until=until)
            if part > 0:
                hours = _add(hours, key, piece.provider, dollars(price, part))
    return Ledger(tuple(rows.values()), days, hours, (*ledger.pods, uid))


def prune(ledger: Ledger, now: float, *, present: set[str] | None = None) -> Ledger:
    """`ledger` bounded: days of the last DAYS_KEPT UTC days, hours of the last HOURS_KEPT,
    at most MAX_ROWS total rows (the smallest of the rest summed into (provider, OTHER)), and
    the newest MAX_UIDS uids. With `present` (the uids of a synced Pod reflector), the uids
    of Pods that are gone are dropped too: they can never be folded again."""
    first_day = day_key(_start(day_key(now)) - (DAYS_KEPT - 1) * 86_400.0)
    first_hour = hour_key(_start(hour_key(now)) - (HOURS_KEPT - 1) * 3_600.0)
    days = {k: dict(v) for k, v in ledger.days.items() if k >= first_day}
    hours = {k: dict(v) for k, v in ledger.hours.items() if k >= first_hour}
    rows = sorted(ledger.total, key=lambda r: (-(r.dollars + r.unpriced_seconds), r.provider, r.namespace))
    if len(rows) > MAX_ROWS:
        merged = {(r.provider, r.namespace): r for r in rows[: MAX_ROWS - _other_rows(rows[MAX_ROWS:])]}
        for row in rows[len(merged) :]:
            other = merged.get((row.provider, OTHER), Row(row.provider, OTHER))
            merged[(row.provider, OTHER)] = Row(
                row.provider, OTHER, other.dollars + row.dollars, other.unpriced_seconds + row.unpriced_seconds
            )
        rows = list(merged.values())
    pods = [uid for uid in ledger.pods if present is None or uid in present][-MAX_UIDS:]
    return Ledger(tuple(rows), days, hours, tuple(pods))


def _other_rows(overflow: list[Row]) -> int:
    """How many OTHER rows the overflow needs (one per provider it holds)."""
    return min(MAX_ROWS, len({r.provider for r in overflow}))


def dump(ledger: Ledger) -> dict[str, Any]:
    """The JSON of `status.spend.settled`, dollars rounded to 1e-6, seconds to 1e-3."""
    return {
        "total": [[r.provider, r.namespace, round(r.dollars, 6), round(r.unpriced_seconds, 3)] for r in ledger.total],
        "days": {k: {p: round(v, 6) for p, v in sorted(by.items())} for k, by in sorted(ledger.days.items())},
        "hours": {k: {p: round(v, 6) for p, v in sorted(by.items())} for k, by in sorted(ledger.hours.items())},
        "pods": list(ledger.pods),
    }


def parse(raw: Any) -> Ledger:
    """The ledger in `status.spend.settled`; EMPTY for None; LedgerError if it is not one."""
    if raw is None:
        return EMPTY
    try:
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        rows = tuple(Row(str(p), str(n), _number(d), _number(s)) for p, n, d, s in raw.get("total") or [])
        days = _table(raw.get("days") or {})
        hours = _table(raw.get("hours") or {})
        for key in (*days, *hours):
            _start(key)
        pods = tuple(str(uid) for uid in raw.get("pods") or [])
    except (ValueError, TypeError, AttributeError) as exc:
        raise LedgerError(f"not a settled ledger: {exc}") from None
    return Ledger(rows, days, hours, pods)


def _number(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{value!r} is not a non-negative amount")
    return number


def _table(raw: Any) -> dict[str, dict[str, float]]:
    if not isinstance(raw, dict):
        raise ValueError("a table is not an object")
    return {str(k): {str(p): _number(v) for p, v in dict(by).items()} for k, by in raw.items()}


def at_hour(key: str) -> datetime:
    """The start of a table's hour or day key, as an aware datetime."""
    return datetime.fromtimestamp(_start(key), UTC)


def hour_keys(now: float, count: int) -> list[str]:
    """The keys of the last `count` hours up to `now`'s, oldest first."""
    top = datetime.fromtimestamp(_start(hour_key(now)), UTC)
    return [(top - timedelta(hours=i)).strftime("%Y-%m-%dT%H") for i in reversed(range(count))]


def day_keys(now: float, count: int) -> list[str]:
    """The keys of the last `count` UTC days up to `now`'s, oldest first."""
    top = datetime.fromtimestamp(_start(day_key(now)), UTC)
    return [(top - timedelta(days=i)).strftime("%Y-%m-%d") for i in reversed(range(count))]
