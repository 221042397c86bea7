"""Receive timestamps in the kubelet's log format: RFC3339, UTC, nine fraction digits.

Used by the provider and supervisor for the times in their records, and by the log reader
to show arrival times (`timestamps`) and compare them with `since`. Pure apart from reading
the clock in `now_stamp`.
Tests: tests/providers/local/test_local_logs.py.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def stamp_from_ns(epoch_ns: int) -> str:
    """`epoch_ns` nanoseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def now_stamp() -> str:
    return stamp_from_ns(time.time_ns())


def ns_from_datetime(moment: datetime) -> int:
    """Nanoseconds since the epoch (a naive datetime is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def datetime_from_stamp(stamp: str) -> datetime:
    """The aware UTC datetime of a stamp (nanoseconds truncated to microseconds)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    moment = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return moment.replace(microsecond=int((fraction or "0")[:6].ljust(6, "0")))
