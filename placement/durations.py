"""Durations as a NodePool spells them (`30s`, `5m`, `1h30m`: Go's units h, m, s) and the
error every NodePool field reports through (`PoolError`, naming the field and the fix).

Pure; `placement.pools` and `placement.interruptspec` parse with it (`placement.pools` re-exports it).
Tests: tests/placement/test_pool_interruption.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


class PoolError(ValueError):
    """A NodePool that placement cannot use; the message names the field and the fix."""


def parse_duration(text: Any) -> float:
    """`30s`, `5m`, `1h30m`, `1.5m` (Go's units h, m, s) to seconds; PoolError otherwise."""
    match = _DURATION.match(text.strip()) if isinstance(text, str) and text.strip() else None
    if match is None or not any(match.groups()):
        raise PoolError(f"{text!r} is not a duration such as 30s, 5m or 1h30m")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def format_duration(seconds: float) -> str:
    """The inverse of parse_duration for display: 300 -> `5m`, 90 -> `1m30s`."""
    whole = int(round(seconds))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


def bounded_duration(raw: Any, field: str, low: float, high: float) -> float:
    """`raw` parsed as a duration within [low, high] seconds; PoolError naming `field` and the range."""
    try:
        seconds = parse_duration(raw)
    except PoolError as exc:
        raise PoolError(f"{field}: {exc}") from None
    if not low <= seconds <= high:
        span = f"between {format_duration(low)} and {format_duration(high)}"
        raise PoolError(f"{field}: {raw!r} is out of range; use {span}")
    return seconds


def fields_of(raw: Any, field: str, allowed: Sequence[str], example: str) -> Mapping[str, Any]:
    """`raw` as the object `field` must be, with no field but `allowed`; PoolError naming an
    example of one, or the unknown fields and the allowed ones."""
    if not isinstance(raw, Mapping):
        raise PoolError(f"{field}: must be an object such as {example}")
    unknown = sorted(str(k) for k in set(raw) - set(allowed))
    if unknown:
        raise PoolError(f"{field}: unknown fields {unknown}; allowed: {', '.join(allowed)}")
    return raw
