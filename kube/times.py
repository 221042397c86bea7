"""The API server's two timestamp forms, written the same way by every writer in Nebula.

Used by Event recording, the leader Lease, Node conditions and Pod status; pure.
Tests: tests/kube/test_leader.py, tests/kube/test_times.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def rfc3339(moment: datetime) -> str:
    """The API server's timestamp form (second precision, Z)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: datetime) -> str:
    """A MicroTime (Lease renew and acquire times): microseconds, Z."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> datetime:
    """A timestamp in either form, as an aware UTC datetime; ValueError if it is neither."""
    moment = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def moment_of(text: Any) -> datetime | None:
    """`text` (either form) as an aware UTC datetime; None when it is no timestamp (a missing or
    damaged field of an object read from the API)."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return parse_rfc3339(text)
    except ValueError:
        return None


def epoch_of(text: Any) -> float | None:
    """`text` (either form) in epoch seconds; None when it is no timestamp."""
    moment = moment_of(text)
    return None if moment is None else moment.timestamp()
