"""Money where the console already looks: a virtual node whose running Pods carry no price reads
"unknown" (or "$X/h + N unpriced"), never $0.00/h; a Pod a budget holds gated shows
BudgetExceeded and the budget's message on the dashboard (linked to the Spend page), in the
admin's gated list and in the REST API's /api/pods/."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from console import dashboard, models, runtime
from console.mirror import Mirror
from console.observer import ConsoleObserver
from kube import names
from placement.gated import Waiting

NOW = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
HELD = "pool gpu-a at $19.20/h of $20.00/h"


def running(node: str, name: str, price: float | None) -> None:
    models.TrackedPod.objects.create(
        uid=f"u-{name}",
        namespace="default",
        name=name,
        provider=node[7:],
        node=node,
        claim=name,
        phase="Running",
        hourly_price=price,
    )


@pytest.fixture
def staff_client(db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    return client


def test_a_node_of_unpriced_pods_reads_unknown_and_a_mixed_one_counts_them(db: Any) -> None:
    for provider in ("byo", "mixed", "priced", "idle"):
        models.VirtualNode.objects.create(name=f"nebula-{provider}", provider=provider)
    running("nebula-byo", "byo-0", None)
    running("nebula-mixed", "mixed-0", 1.5)
    running("nebula-mixed", "mixed-1", None)
    running("nebula-mixed", "mixed-2", None)
    running("nebula-priced", "priced-0", 0.42)
    tiles = {tile.node.name: tile.spend_text for tile in dashboard.figures(NOW)["tiles"]}
    assert tiles == {
        "nebula-byo": "unknown",
        "nebula-mixed": "$1.50/h + 2 unpriced",
        "nebula-priced": "$0.42/h",
        "nebula-idle": "$0.00/h",  # nothing runs: nothing is billed, a known zero
    }
    assert dashboard.figures(NOW)["total_spend"] == "$1.92/h + 3 unpriced"


def test_the_dashboard_never_prints_zero_for_an_unpriced_node(staff_client: Client) -> None:
    models.VirtualNode.objects.create(name="nebula-byo", provider="byo")
    running("nebula-byo", "byo-0", None)
    page = staff_client.get("/").content.decode()
    assert re.search(r'<dd class="spend">unknown</dd>', page) and "$0.00/h" not in page
    assert "(1 pods, unknown running)" in page


def test_a_pod_held_by_a_budget_shows_the_reason_and_message_everywhere(
    staff_client: Client,
    observer: ConsoleObserver,
    installed_runtime: Callable[..., Any],
    holding_placement: Callable[..., Any],
) -> None:
    placement = holding_placement(("held-0", "gpu-a", Waiting("u-h0", names.EVENT_BUDGET_EXCEEDED, HELD, 1.0)))
    installed_runtime(handlers=[], placement=placement)
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    page = staff_client.get("/").content.decode()
    reason = re.search(r'<td class="wait-reason">(.*?)</td>', page)
    assert reason is not None and 'href="/spend/#pools">BudgetExceeded</a>' in reason.group(1)
    assert HELD in re.sub(r"<[^>]+>", "", page)
    listed = staff_client.get(f"/admin/console/trackedpod/?wait_reason={names.EVENT_BUDGET_EXCEEDED}")
    assert "default/held-0" in listed.content.decode()
    api = APIClient()
    api.force_login(User.objects.get(username="ops"))
    (row,) = api.get("/api/pods/").json()["results"]
    assert (row["name"], row["reason"], row["wait_reason"], row["waiting_for"]) == (
        "held-0",
        names.REASON_SCHEDULING_GATED,
        names.REASON_BUDGET_EXCEEDED,
        HELD,
    )
