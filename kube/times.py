"""The API server's two timestamp forms, written the same way by every writer in Nebula.

Used by Event recording, the leader Lease, Node conditions and Pod status; pure.
Tests: tests/kube/test_leader.py.
"""

from __future__ import annotations

from datetime import datetime


def rfc3339(moment: datetime) -> str:
    """The API server's timestamp form (second precision, Z)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: datetime) -> str:
    """A MicroTime (Lease renew and acquire times): microseconds, Z."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
