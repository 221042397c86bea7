"""The dashboard's figures, read from the mirror tables (so a shared console on PostgreSQL
shows the same as the manager's own listener).

Called by `console.views` on every page and fragment request; a handful of queries, each
bounded. Reads only. Pods read as `kubectl get pods` prints them (console.cells); how a
node's instances ended (interrupted, unreachable, failed) in `console.ends`' words.
Tests: tests/console/test_console_browser.py, tests/console/test_console_ends.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Sum
from django.utils import formats, timezone

from console import cells, ends, models
from kube import names
from placement.spendview import Rate

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
MAX_GATED = 50
MAX_PODS = 100
MAX_ORPHANS = 50
MAX_BLOCKS = 50
MAX_EVENTS = 15


@dataclass
class Tile:
    """One virtual node as the dashboard shows it."""

    node: models.VirtualNode
    phases: dict[str, int] = field(default_factory=dict)
    hourly_spend: float = 0.0
    priced: int = 0  # running Pods whose price is known
    unpriced: int = 0  # running Pods without a price (not placed by a pool): unknown, never $0
    lease_age: float | None = None  # seconds since the node's Lease was renewed
    bad: dict[str, int] = field(default_factory=dict)  # Pods per bad kubectl STATUS (CrashLoopBackOff: 2)
    now: datetime | None = None  # the time the figures are read at

    @property
    def spend_text(self) -> str:
        """`$1.20/h`, `$1.20/h + 2 unpriced`, or `unknown` when only unpriced Pods run (Rate's words)."""
        return Rate(self.hourly_spend, self.unpriced).text()

    @property
    def interrupted_text(self) -> str:
        """`3 (SpotInterruption 2, Reclaimed 1) on Spot`, or `none`: the provider took them."""
        return ends.interrupted_text(self.node.interruptions or {}, self.node.interruption_tiers or {})

    @property
    def failed_text(self) -> str:
        """`1 (Error 1)`, or `none`: the workload itself failed."""
        return ends.failed_text(self.node.failures or {})

    @property
    def unreachable_text(self) -> str:
        """`since 2026-12-05 12:01:07 UTC (5m): 4 Pods waiting, none failed`, or `no`: the provider
        does not answer, and I3 holds (nothing is failed or killed for it)."""
        since = self.node.unreachable_since
        if since is None:
            return "no"
        at = formats.date_format(timezone.localtime(since), "DATETIME_FORMAT")
        waiting = self.node.unreachable_pods
        spell = f" ({cells.age_text(since, self.now)})" if self.now is not None else ""
        return f"since {at}{spell}: {waiting} Pod{'' if waiting == 1 else 's'} waiting, none failed"

    @property
    def state(self) -> str:
        return {True: "ready", False: "not-ready"}.get(self.node.ready, "unknown")


@dataclass
class PodLine:
    """One Pod as `kubectl get pods` prints it, with its node."""

    pod: models.TrackedPod
    status: str
    bad: bool
    restarts: str
    age: str


@dataclass
class Block:
    entry: models.BlocklistEntry
    seconds_left: float


def figures(now: datetime) -> dict[str, Any]:
    """Everything the dashboard template needs."""
    nodes = models.VirtualNode.objects.order_by("name")
    tiles = {node.name: Tile(node, dict.fromkeys(PHASES, 0), now=now) for node in nodes}
    for each in tiles.values():
        if each.node.last_lease_renewal is not None:
            each.lease_age = max(0.0, (now - each.node.last_lease_renewal).total_seconds())
    for row in models.TrackedPod.objects.values("node", "phase").annotate(n=Count("id")):
        tile = tiles.get(row["node"])
        if tile is not None:
            tile.phases[row["phase"] or "Unknown"] = tile.phases.get(row["phase"] or "Unknown", 0) + row["n"]
    for row in models.TrackedPod.objects.exclude(node="").values("node", "status").annotate(n=Count("id")):
        tile = tiles.get(row["node"])
        if tile is not None and cells.is_bad(row["status"]):
            tile.bad[row["status"]] = row["n"]
    running = models.TrackedPod.objects.filter(phase="Running", hourly_price__isnull=False)
    for row in running.values("node").annotate(spend=Sum("hourly_price"), n=Count("id")):
        tile = tiles.get(row["node"])
        if tile is not None:
            tile.hourly_spend, tile.priced = float(row["spend"] or 0.0), row["n"]
    unpriced = models.TrackedPod.objects.filter(phase="Running", hourly_price__isnull=True).exclude(node="")
    for row in unpriced.values("node").annotate(n=Count("id")):
        tile = tiles.get(row["node"])
        if tile is not None:
            tile.unpriced = row["n"]
    blocks = [
        Block(entry, (entry.expires_at - now).total_seconds())
        for entry in models.BlocklistEntry.objects.filter(expires_at__gt=now).order_by("expires_at")[:MAX_BLOCKS]
    ]
    orphans = list(models.InstanceClaim.objects.filter(orphan=True).order_by("provider", "claim")[:MAX_ORPHANS])
    gated = models.TrackedPod.objects.filter(reason=names.REASON_SCHEDULING_GATED, node="")
    pods = pod_lines(models.TrackedPod.objects.exclude(node="").order_by("namespace", "name")[:MAX_PODS], now)
    return {
        "tiles": list(tiles.values()),
        "total_spend": Rate(
            sum(t.hourly_spend for t in tiles.values()), sum(t.unpriced for t in tiles.values())
        ).text(),
        "pod_count": sum(sum(t.phases.values()) for t in tiles.values()),
        "pods": pods,
        "pod_lines_count": models.TrackedPod.objects.exclude(node="").count(),
        "gated": list(gated.order_by("namespace", "name")[:MAX_GATED]),
        "gated_count": gated.count(),
        "orphans": orphans,
        "orphan_count": models.InstanceClaim.objects.filter(orphan=True).count(),
        "blocks": blocks,
        "events": list(models.RecentEvent.objects.order_by("-seq")[:MAX_EVENTS]),
        "now": now,
    }


def pod_lines(pods: Iterable[models.TrackedPod], now: datetime) -> list[PodLine]:
    """kubectl's columns of `pods`, the ones in a bad state first (then by namespace and name)."""
    lines = []
    for pod in pods:
        status = pod.status or pod.phase
        restarts = cells.restarts_text(pod.restarts, pod.last_restart_at, now)
        lines.append(PodLine(pod, status, cells.is_bad(status), restarts, cells.age_text(pod.created_at, now)))
    return sorted(lines, key=lambda line: not line.bad)
