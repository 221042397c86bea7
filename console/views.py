"""The console's pages: the dashboard (`/`), its self-refreshing fragment, the Spend page
(`/spend/`), and `/readyz`.

The dashboard reads the mirror (`console.dashboard`); the Spend page placement's spend report
(`console.spendpage`); staff login required (the admin's).
`/readyz` reads the console's observer: ready while this process leads or stands by and
has reached the cluster recently. Nothing here changes operational state.
Tests: tests/console/test_console_units.py, tests/console/test_spend_page.py.
"""

# mypy: disallow-untyped-decorators=False

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from console import dashboard, runtime, spendpage
from console.observer import installed as installed_observer

REFRESH_SECONDS = 5
READY_WINDOW = 30.0  # seconds: how recent a successful contact with the cluster must be


@never_cache
@require_GET
@staff_member_required
def index(request: HttpRequest) -> HttpResponse:
    context = dashboard.figures(datetime.now(UTC))
    context["refresh_seconds"] = REFRESH_SECONDS
    return render(request, "console/dashboard.html", context)


@never_cache
@require_GET
@staff_member_required
def panels(request: HttpRequest) -> HttpResponse:
    """The dashboard's body alone, for the page's script to swap in without a reload."""
    return render(request, "console/_panels.html", dashboard.figures(datetime.now(UTC)))


@never_cache
@require_GET
@staff_member_required
def spend(request: HttpRequest) -> HttpResponse:
    """Charts and tables of spend and budgets, drawn server-side from placement's report."""
    return render(request, "console/spend.html", spendpage.figures(runtime.current().spend_report()))


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """200 when this process leads or stands by and reached the cluster in the last 30 s."""
    ready, role, why = readiness()
    return JsonResponse({"ready": ready, "role": role, "reason": why}, status=200 if ready else 503)


def readiness() -> tuple[bool, str, str]:
    observer = installed_observer()
    if observer is None:
        return False, "none", "the manager does not run in this process"
    leader, at = observer.leadership_seen()
    if time.monotonic() - at <= READY_WINDOW:
        if leader is None:
            return False, "unknown", "leader election could not reach the cluster"
        return True, "leader" if leader else "standby", "cluster reachable"
    synced = observer.last_node_sync()
    if synced is not None and (datetime.now(UTC) - synced).total_seconds() <= READY_WINDOW:
        return True, "leader", "cluster reachable (no leader election)"
    return False, "unknown", f"no contact with the cluster in the last {READY_WINDOW:.0f}s"
