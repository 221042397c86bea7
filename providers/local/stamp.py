"""Receive timestamps in the kubelet's log format: RFC3339, UTC, nine fraction digits.

Used by the supervisor to stamp each output line and by the log reader to filter and
strip them. Every stamp is exactly `STAMP_LENGTH` bytes, so a record's prefix can be cut
by position. Pure apart from reading the clock in `now_stamp`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

STAMP_LENGTH = 30  # len("2026-11-30T11:25:44.123456789Z")


def stamp_from_ns(epoch_ns: int) -> str:
    """`epoch_ns` nanoseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def now_stamp() -> str:
    return stamp_from_ns(time.time_ns())


def stamp_from_datetime(moment: datetime) -> str:
    """A datetime as a stamp; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{moment.microsecond * 1000:09d}Z"


def datetime_from_stamp(stamp: str) -> datetime:
    """The aware UTC datetime of a stamp (nanoseconds truncated to microseconds)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    moment = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return moment.replace(microsecond=int((fraction or "0")[:6].ljust(6, "0")))
