"""A Pod's billing record: when its instances billed, kept in the Pod's annotation
`nebula.io/billing`, so spend is computed from facts and survives any restart (design I6, I12).

Pure and imports nothing of Nebula. Written only by the vnode (a span opens when the provider
starts billing the Pod's instance and closes when it stops); read by placement (spend, budgets)
and the console. Spend is never stored per Pod: it is `price x billed seconds`, so a restart or a
leader handoff recomputes it exactly, and nothing is added twice. The record is bounded: past
`MAX_SPANS` closed spans the two oldest merge into one (its total stays exact; only how it
spreads over hours and days becomes an even estimate).
Tests: tests/kube/test_billing.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

MAX_SPANS = 32  # closed spans kept; older ones merge pairwise
MAX_TEXT = 4096  # characters of annotation read; a longer one is not ours (BillingError)


class BillingError(ValueError):
    """The annotation is not a billing record Nebula wrote."""


@dataclass(frozen=True, slots=True)
class Span:
    """Billing between `start` and `end` (epoch seconds): `seconds` billed within them (equal to
    `end - start` unless merged from several spans)."""

    start: float
    end: float
    seconds: float

    def within(self, since: float, until: float) -> float:
        """The billed seconds of this span inside [since, until), spread evenly over the span."""
        lo, hi = max(self.start, since), min(self.end, until)
        if hi <= lo:
            return 0.0
        width = self.end - self.start
        return self.seconds if width <= 0 else self.seconds * (hi - lo) / width


@dataclass(frozen=True, slots=True)  # one per tracked Pod: no per-object __dict__ (bench/poll.py: RSS)
class Billing:
    """`open`: epoch seconds the current instance (`instance`) began billing; None when nothing
    bills now. `closed`: earlier spans, oldest first."""

    open: float | None = None
    instance: str = ""
    closed: tuple[Span, ...] = ()

    @property
    def billing(self) -> bool:
        return self.open is not None

    def opened(self, at: float, instance: str) -> Billing:
        """`instance` bills from `at`. The same instance already open: unchanged. Another one open:
        that one's span closes at `at` first (it was replaced)."""
        if self.open is not None and self.instance == instance:
            return self
        return replace(self.closed_at(at), open=at, instance=instance)

    def closed_at(self, at: float) -> Billing:
        """Nothing bills from `at` (never before the open span's start). Nothing open: unchanged."""
        if self.open is None:
            return self
        end = max(at, self.open)
        spans = [*self.closed, Span(self.open, end, end - self.open)]
        while len(spans) > MAX_SPANS:
            first, second = spans[0], spans[1]
            spans[:2] = [Span(first.start, second.end, first.seconds + second.seconds)]
        return Billing(None, "", tuple(spans))

    def seconds(self, *, now: float, since: float = -math.inf, until: float = math.inf) -> float:
        """Billed seconds inside [since, until), the open span counted up to `now`."""
        total = sum(span.within(since, until) for span in self.closed)
        if self.open is not None and now > self.open:
            total += Span(self.open, now, now - self.open).within(since, until)
        return total


EMPTY = Billing()


def dollars(hourly_price: float, seconds: float) -> float:
    """What `seconds` cost at `hourly_price` dollars an hour."""
    return hourly_price * seconds / 3600.0


def parse(text: str | None) -> Billing:
    """The record in an annotation's value; EMPTY for None or ""; BillingError otherwise."""
    if not text:
        return EMPTY
    if len(text) > MAX_TEXT:
        raise BillingError(f"longer than {MAX_TEXT} characters")
    try:
        raw = json.loads(text)
        return _from_json(raw)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise BillingError(f"not a billing record: {exc}") from None


def _from_json(raw: Any) -> Billing:
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    opened = raw.get("open")
    spans = tuple(Span(float(s), float(e), float(n)) for s, e, n in raw.get("closed") or [])
    if any(not (math.isfinite(s.start) and math.isfinite(s.end) and 0 <= s.seconds) for s in spans):
        raise ValueError("a span is not finite")
    if opened is not None and not math.isfinite(float(opened)):
        raise ValueError("open is not finite")
    return Billing(None if opened is None else float(opened), str(raw.get("instance") or ""), spans)


def dump(billing: Billing) -> str:
    """The annotation's value: compact JSON, times to the millisecond."""
    body: dict[str, Any] = {"open": None if billing.open is None else round(billing.open, 3)}
    if billing.instance:
        body["instance"] = billing.instance
    body["closed"] = [[round(s.start, 3), round(s.end, 3), round(s.seconds, 3)] for s in billing.closed]
    return json.dumps(body, separators=(",", ":"))


def day_start(now: float) -> float:
    """Epoch seconds of the UTC midnight that began `now`'s day."""
    moment = datetime.fromtimestamp(now, UTC)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def month_start(now: float) -> float:
    """Epoch seconds of the first instant of `now`'s UTC calendar month."""
    moment = datetime.fromtimestamp(now, UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


def next_day(now: float) -> float:
    """Epoch seconds of the next UTC midnight after `now`."""
    return day_start(now) + 86_400.0
