"""The Spend page (/spend/) over a hand-built SpendReport: staff login required, linked from the
dashboard, four charts with their bars, the pools against their budgets (the BudgetExceeded
message), the dearest Pods, unknown prices read "unknown", bounded tables; and over the real
`stack` rig (placement's own report) the page renders."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from console import runtime, spendpage
from tests.console.spendreports import ReportingPlacement, report
from tests.support.rigs.placement import Stack


@pytest.fixture
def staff_client(db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    return client


@pytest.fixture
def reporting() -> Iterator[ReportingPlacement]:
    placement = ReportingPlacement(report(pods=60, pools_extra=40))
    runtime.install(placement=placement)  # type: ignore[arg-type]
    yield placement
    runtime.clear()


def test_the_page_needs_a_staff_login_and_the_dashboard_links_it(db: Any, staff_client: Client) -> None:
    response = Client().get("/spend/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert 'href="/spend/"' in staff_client.get("/").content.decode()


def test_the_page_shows_charts_pools_and_the_dearest_pods(staff_client: Client, reporting: ReportingPlacement) -> None:
    page = staff_client.get("/spend/").content.decode()
    figures = re.findall(r'<figure class="spend-chart" data-unit="(\w+)" data-bars="(\d+)"', page)
    assert [unit for unit, _ in figures] == ["hour", "hour", "day", "day"]
    assert "(every pool: $23.90/h + 1 unpriced now, $239.00 + unpriced today," in page  # 9.6 + 2.5 + 11.8
    assert page.count("<svg") == 4 and "Spend per pool, last 24 hours" in page
    assert "Spend per provider, last 30 days" in page
    # Per pool over 24 hours: 43 pools, 42 with spend: 31 kept and "other" in every hour.
    assert int(figures[0][1]) == 24 * 32 and int(figures[1][1]) == 24 * 2 and int(figures[3][1]) == 30 * 2
    assert page.count('<ul class="legend">') == 4 and ">other</li>" in page
    row = re.search(r'<tr class="pool-row" data-pool="gpu-a">.*?</tr>', page, re.S)
    assert row is not None and "$9.60/h" in row.group(0) and "BudgetExceeded: " in row.group(0)
    assert "$20.00/h, $300.00/day, 2 instances" in row.group(0) and "$19.20/h" in row.group(0)
    byo = re.search(r'<tr class="pool-row" data-pool="byo">.*?</tr>', page, re.S)
    assert byo is not None and byo.group(0).count("unknown") == 4 and "$0.00" not in byo.group(0)
    assert page.count('<tr class="pod-row">') == spendpage.MAX_TOP_PODS and "(50 of 61)" in page
    assert "default/train-000" in page and "$4.80/h" in page


def test_an_unpriced_pod_reads_unknown_never_zero() -> None:
    (unpriced,) = [p for p in report().top_pods if p.hourly_price is None]
    line = spendpage.pod_line(unpriced)
    assert line.price == "unknown" and line.total == "unknown"


def test_without_placement_the_page_says_so(staff_client: Client) -> None:
    page = staff_client.get("/spend/").content.decode()
    assert "Placement does not run in this process" in page and page.count("no spend in this period") == 4


def test_the_page_renders_placements_own_report_over_the_stack(staff_client: Client, stack: Stack) -> None:
    runtime.install(handlers=[r.handler for r in stack.runners], placement=stack.placement)
    try:
        response = staff_client.get("/spend/")
    finally:
        runtime.clear()
    page = response.content.decode()
    assert response.status_code == 200 and page.count("<svg") == 4
    assert "Placement does not run" not in page
