"""Ages as kubectl prints them: apimachinery's HumanDuration and translateTimestampSince.

Pure; `tables` (built-in printers) and `printcolumns` (CRD `date` columns) call them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration: `5s`, `3m2s`, `15m`, `5h3m`, `2d3h`, `400d`, `3y20d`."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: Any, now: datetime) -> str:
    """kubectl's translateTimestampSince: `<unknown>` for a missing or unparsable time."""
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        moment = datetime.fromisoformat(timestamp.replace("z", "Z"))
    except ValueError:
        return "<unknown>"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return human_duration((now - moment).total_seconds())
