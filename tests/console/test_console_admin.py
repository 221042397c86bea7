"""The admin over the mirror is read-only for everyone, filters and searches, links a Pod to
its claim and node, lists the Pods placement holds gated (with the dashboard), and offers one
audited, staff-only, CSRF-protected action."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import User
from django.test import Client

from console import models, runtime
from console.mirror import Mirror
from console.observer import ConsoleObserver
from kube import names
from placement.blocklist import Blocklist
from placement.gated import Waiting
from providers.base import BlockBreadth, BlockScope, Tier
from providers.claim import claim_name
from tests.support.rigs.offline import adopt_new_pod, offline_handler

LISTS = ["trackedpod", "instanceclaim", "virtualnode", "blocklistentry", "recentevent"]


@pytest.fixture
def mirrored(
    db: Any, fake_provider: Callable[..., Any], observer: ConsoleObserver, installed_runtime: Callable[..., Any]
) -> dict[str, Any]:
    """Two Pods on nebula-alpha, one orphan instance, one blocklist entry, one Event; mirrored once."""
    handler = offline_handler(fake_provider("alpha"))
    pods = [adopt_new_pod(handler, "train-0", **{"nebula.io/hourly-price": "2.5"}), adopt_new_pod(handler, "train-1")]
    orphan = adopt_new_pod(offline_handler(handler.provider), "ghost")  # provisioned, tracked by no Handler of ours
    handler.status_sync.poll_once()
    blocklist = Blocklist()
    scope = BlockScope("alpha", BlockBreadth.OFFERING, tier=Tier.SPOT, accelerator="h100", region="us-east-1")
    blocklist.record("alpha", BlockScope(**{**scope.__dict__, "reason": "NoCapacity: sold out"}))
    observer.event_recorded("Pod", "default", "train-0", "Normal", "Provisioned", "instance is up")
    installed_runtime(handlers=[handler], blocklist=blocklist)
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    return {"handler": handler, "pods": pods, "orphan": orphan, "blocklist": blocklist}


@pytest.fixture
def staff_client(db: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("ops", password="pw-ops-12345", is_staff=True))
    return client


@pytest.fixture
def superuser_client(db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-root-12345"))
    return client


def test_the_mirror_holds_what_memory_holds(mirrored: dict[str, Any]) -> None:
    assert sorted(models.TrackedPod.objects.values_list("name", flat=True)) == ["train-0", "train-1"]
    assert models.TrackedPod.objects.get(name="train-0").hourly_price == 2.5
    orphans = models.InstanceClaim.objects.filter(orphan=True)
    ghost = mirrored["orphan"]["metadata"]
    assert [(o.claim, o.pod) for o in orphans] == [(claim_name("default", "ghost", ghost["uid"]), "")]
    assert models.VirtualNode.objects.get().name == "nebula-alpha"
    assert models.BlocklistEntry.objects.get().reason == "NoCapacity: sold out"
    assert models.RecentEvent.objects.get().reason == "Provisioned"


@pytest.mark.parametrize("model", LISTS)
def test_each_list_renders_for_a_superuser_without_add_change_or_delete(
    mirrored: dict[str, Any], superuser_client: Client, model: str
) -> None:
    page = superuser_client.get(f"/admin/console/{model}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"/admin/console/{model}/add/" not in html
    assert 'name="action"' not in html  # no bulk actions
    assert superuser_client.get(f"/admin/console/{model}/add/").status_code == 403
    tables: dict[str, Any] = {
        "trackedpod": models.TrackedPod,
        "instanceclaim": models.InstanceClaim,
        "virtualnode": models.VirtualNode,
        "blocklistentry": models.BlocklistEntry,
        "recentevent": models.RecentEvent,
    }
    obj = tables[model].objects.first()
    detail = superuser_client.get(f"/admin/console/{model}/{obj.pk}/change/")
    assert detail.status_code == 200
    assert "Save" not in detail.content.decode() and "/delete/" not in detail.content.decode()
    assert superuser_client.post(f"/admin/console/{model}/{obj.pk}/change/", {}).status_code == 403
    assert superuser_client.post(f"/admin/console/{model}/{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    assert models.TrackedPod.objects.count() == 2


def test_filters_search_and_links_between_pod_claim_and_node(mirrored: dict[str, Any], staff_client: Client) -> None:
    pod = models.TrackedPod.objects.get(name="train-0")
    html = staff_client.get("/admin/console/trackedpod/?q=train-0").content.decode()
    assert "default/train-0" in html and "default/train-1" not in html
    assert f"/admin/console/instanceclaim/?instance_id={pod.instance_id}" in html  # the instance's claim
    assert "/admin/console/virtualnode/?name=nebula-alpha" in html
    claim_page = staff_client.get(f"/admin/console/instanceclaim/?claim={pod.claim}").content.decode()
    assert pod.instance_id in claim_page and f"/admin/console/trackedpod/?claim={pod.claim}" in claim_page
    orphans = staff_client.get("/admin/console/instanceclaim/?orphan__exact=1").content.decode()
    ghost = mirrored["orphan"]["metadata"]
    assert claim_name("default", "ghost", ghost["uid"]) in orphans and "train-0" not in orphans
    running = staff_client.get("/admin/console/trackedpod/?phase=Running").content.decode()
    assert "default/train-0" in running


def test_clearing_a_blocklist_entry_is_staff_only_csrf_checked_and_audited(
    mirrored: dict[str, Any], staff_client: Client, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    entry = mirrored["blocklist"].entries()[0]
    url = f"/admin/console/blocklistentry/{entry.id}/clear/"
    viewer = Client()
    viewer.force_login(User.objects.create_user("viewer", password="pw-viewer-1234"))  # not staff
    assert viewer.post(url).status_code == 302 and mirrored["blocklist"].get(entry.id) is not None
    confirm = staff_client.get(url)
    assert confirm.status_code == 200 and mirrored["blocklist"].get(entry.id) is not None
    assert staff_client.post(url).status_code == 403  # no CSRF token
    assert mirrored["blocklist"].get(entry.id) is not None
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', confirm.content.decode())
    assert token is not None
    with caplog.at_level(logging.INFO):
        done = staff_client.post(url, {"csrfmiddlewaretoken": token.group(1)})
    assert done.status_code == 302
    assert mirrored["blocklist"].get(entry.id) is None
    assert f"blocklist entry {entry.id} cleared by ops" in caplog.text
    audit = LogEntry.objects.get()
    assert audit.action_flag == DELETION and audit.user.username == "ops" and entry.id in audit.change_message


def test_gated_pods_are_listed_in_the_admin_and_on_the_dashboard_with_what_they_wait_for(
    db: Any,
    observer: ConsoleObserver,
    installed_runtime: Callable[..., Any],
    holding_placement: Callable[..., Any],
    staff_client: Client,
) -> None:
    message = "waiting for capacity: alpha/h100 x8 Spot in us-east-1 sold out; next look at 12:01:00Z at the latest"
    placement = holding_placement(
        ("gated-0", "train", Waiting("u-g0", names.EVENT_WAITING_FOR_CAPACITY, message, next_look=1.0)),
        ("gated-1", "nowhere", Waiting("u-g1", names.EVENT_NO_POOL, "NodePool 'nowhere' does not exist")),
    )
    installed_runtime(handlers=[], placement=placement)
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    listed = staff_client.get(f"/admin/console/trackedpod/?reason={names.REASON_SCHEDULING_GATED}").content.decode()
    assert "default/gated-0" in listed and "default/gated-1" in listed
    assert names.EVENT_WAITING_FOR_CAPACITY in listed and names.EVENT_NO_POOL in listed
    waiting = staff_client.get(f"/admin/console/trackedpod/?wait_reason={names.EVENT_NO_POOL}").content.decode()
    assert "default/gated-1" in waiting and "default/gated-0" not in waiting
    dashboard = staff_client.get("/").content.decode()
    assert 'Gated Pods waiting for placement <span class="empty">(2)</span>' in dashboard
    words = re.sub(r"<[^>]+>", "", dashboard)  # free text comes one nowrap span per word
    assert message in words and "NodePool &#x27;nowhere&#x27; does not exist" in words


TIME = re.compile(r"\b20[0-9]{2}-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9] UTC\b")


def test_times_read_24_hour_with_seconds_in_utc(mirrored: dict[str, Any], superuser_client: Client) -> None:
    """One format on the admin's lists, its object pages and the dashboard: `2026-12-05 07:04:12 UTC`."""
    claim = models.InstanceClaim.objects.filter(orphan=False).first()
    assert claim is not None
    pages = ["/admin/console/instanceclaim/", "/admin/console/recentevent/", "/admin/console/blocklistentry/"]
    pages += [f"/admin/console/instanceclaim/{claim.pk}/change/", "/"]
    for page in pages:
        html = superuser_client.get(page).content.decode()
        assert TIME.search(html), page
        assert not re.search(r"\b[ap]\.m\.|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\.? [0-9]", html), page


def test_a_claimed_instance_is_not_marked_and_an_orphan_is(mirrored: dict[str, Any], staff_client: Client) -> None:
    html = staff_client.get("/admin/console/instanceclaim/").content.decode()
    rows = re.findall(r"<tr>.*?</tr>", html.replace("\n", " "))
    orphan_rows = [row for row in rows if "orphan" in row]
    claimed_rows = [row for row in rows if "train-0" in row or "train-1" in row]
    assert len(orphan_rows) == 1 and len(claimed_rows) == 2
    assert 'class="orphan bad"' in orphan_rows[0]
    for row in claimed_rows:  # no red cross, no mark of any kind for "not an orphan"
        assert "icon-no" not in row and "icon-yes" not in row and "bad" not in row


def test_a_counted_event_is_one_row_that_its_repeats_update(
    mirrored: dict[str, Any], observer: ConsoleObserver, staff_client: Client
) -> None:
    """The Event recorder reports each write of an Event with its name and count so far; the
    mirror keeps one row per Event name, its count and last time those of the last write."""
    for count in (1, 4, 9):
        observer.event_recorded(
            "Pod", "default", "train-1", "Warning", "BackOff", "back-off", count=count, event="train-1.ab"
        )
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    row = models.RecentEvent.objects.get(name="train-1")
    assert (row.reason, row.count, row.key) == ("BackOff", 9, "default/train-1.ab")
    assert row.first_at is not None and row.first_at <= row.at
    html = staff_client.get("/admin/console/recentevent/").content.decode()
    assert html.count('title="default/train-1"') == 1 and '<td class="field-count">9</td>' in html
